// Package app holds nodegc's command line: flags, subcommands, config
// loading and wiring. It parses and wires; the packages under pkg/ work.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"
)

// exitError carries an exit code through cobra's error return. Its message,
// if any, has already been printed.
type exitError struct {
	code int
}

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// streams are where commands read and write, so tests can capture them.
type streams struct {
	in  io.Reader
	out io.Writer
	err io.Writer
}

// Main runs the nodegc command line with args (without the program name)
// and returns the process exit code. ctx ends on SIGTERM.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cmd := NewCommand(streams{in: stdin, out: stdout, err: stderr})
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	klog.Flush()
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	fmt.Fprintf(stderr, "nodegc: %v\n", err)
	return 1
}

// NewCommand returns the root command. Without a subcommand it runs `run`.
func NewCommand(s streams) *cobra.Command {
	runOpts := &runOptions{}
	root := &cobra.Command{
		Use:   "nodegc",
		Short: "Node-level garbage collection for Kubernetes",
		Long: `nodegc reclaims what Kubernetes leaves behind. On every node it removes unused
container images and dead containers through the CRI API; one elected
instance also runs the cluster's ownerReference garbage collector.

Without a subcommand, nodegc runs the agent ("nodegc run").`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runOpts.run(cmd, s)
		},
	}
	root.SetIn(s.in)
	root.SetOut(s.out)
	root.SetErr(s.err)

	// klog's flags (-v, --vmodule, ...) as every Kubernetes component has them.
	goFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(goFlags)
	root.PersistentFlags().AddGoFlagSet(goFlags)

	runOpts.addFlags(root.Flags())
	root.AddCommand(newRunCommand(s), newPlanCommand(s), newExplainCommand(s), newConfigCommand(s), newVersionCommand(s))
	return root
}
