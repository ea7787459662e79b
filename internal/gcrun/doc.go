// Package gcrun is the run lifecycle the two node collectors share
// (pkg/images and pkg/containers): one run at a time, timed, recorded and
// reported the same way, and the loops that start runs.
//
// A collector's GarbageCollect is
//
//	return gcrun.Collect(serial, trigger, func(r *Report) error { return collect(ctx, r) }, record, onRun)
//
// so a run that cannot start (another holds the lock) returns ErrInProgress
// and leaves no trace, and every run that starts is timed and recorded,
// whatever it ends with. Its Run method is Every over a ticker, each
// iteration passed to a Supervisor (the agent's watchdog), and each run's
// end is logged by LogEnd with the same words in both collectors. Before a
// run measures the space it freed, Settle waits for the runtime's
// asynchronous cleanup the same way in both.
//
// Invariant: body and after of one Collect never overlap another Collect or
// Exclusive of the same Serial.
package gcrun
