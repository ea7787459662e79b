package ownergc

import (
	"testing"
	"time"
)

// TestIntegration proves the owner GC against a real kube-apiserver and
// etcd from the test bed, with no other collector running: the API
// server's own finalizer semantics (foregroundDeletion, orphan) are what the
// collector cooperates with. One cluster serves every scenario; most share
// one collector and run in parallel in their own namespaces, the rest run
// one after another with collectors of their own.
func TestIntegration(t *testing.T) {
	env := newEnv(t)

	t.Run("shared collector", func(t *testing.T) {
		gc := env.startCollector(t, testConfig())
		scenarios := map[string]func(*testing.T, *itEnv, *testCollector){
			"life of a Deployment, background":                        testDeploymentBackground,
			"life of a Deployment, foreground":                        testDeploymentForeground,
			"life of a Deployment, orphan":                            testDeploymentOrphan,
			"foreground waits for a dependent with its own finalizer": testForegroundDependentFinalizer,
			"blockOwnerDeletion=false does not hold the owner":        testNonBlockingDependent,
			"ownership cycle under foreground deletion":               testForegroundCycle,
			"multiple owners: only the dangling reference goes":       testMultipleOwners,
			"owner that never existed":                                testMadeUpOwner,
			"owner named wrong, observed under its own name":          testOwnerNamedWrong,
			"owner recreated with the same name":                      testOwnerRecreated,
			"object recreated after the decision":                     testObjectRecreatedAfterDecision,
			"owner reference across namespaces":                       testCrossNamespace,
			"cluster-scoped dependent of a namespaced kind":           testClusterScopedDependent,
			"CRD created while the collector runs":                    testCRDCreatedWhileRunning,
			"ghost healed by a failed write":                          testGhostHealedByFailedWrite,
			"frequently updated dependent":                            testFrequentlyUpdatedDependent,
			"a 404 about a resource is no proof of absence":           testNotFoundOfResourceIsNoProof,
		}
		for name, scenario := range scenarios {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				scenario(t, env, gc)
			})
		}
	})
	t.Run("a delete's answer is metadata, its errors intact", func(t *testing.T) { testDeleteAnswer(t, env) })
	t.Run("about one request per collected object", func(t *testing.T) { testRequestsPerObject(t, env) })
	t.Run("restart in the middle of a cascade", func(t *testing.T) { testRestartMidCascade(t, env) })
	t.Run("a stopping run drops its event backlog", func(t *testing.T) { testStopDropsTheEventBacklog(t, env) })
	t.Run("dry run decides and writes nothing", func(t *testing.T) { testDryRun(t, env) })
	t.Run("relist across a delete and recreate", func(t *testing.T) { testRelistAcrossRecreate(t, env) })
	t.Run("an owner back from an etcd restore keeps its dependents", func(t *testing.T) { testOwnerBackFromAnEtcdRestore(t, env) })
	t.Run("an owner back from an etcd restore while orphaning keeps its dependents' references", func(t *testing.T) {
		testOrphaningOwnerBackFromAnEtcdRestore(t, env)
	})
	t.Run("a finalizer hold counts each episode", func(t *testing.T) { testHoldCountsEachEpisode(t, env) })
	t.Run("a finalizer hold ends with its deletion", func(t *testing.T) { testHoldEndsWithItsDeletion(t, env) })
	t.Run("an owner looked up through a version no longer served", func(t *testing.T) { testOwnerLookupThroughUnservedVersion(t, env) })
	t.Run("orphaning waits for a resource that cannot be listed", func(t *testing.T) { testOrphanHeldWhileResourceFails(t, env) })
	t.Run("the wait for a resource that cannot be listed is bounded", func(t *testing.T) { testOrphanHoldExpires(t, env) })
	t.Run("orphaning and foreground wait for a dependent's resource that left discovery", func(t *testing.T) { testDependentResourceLeftDiscovery(t, env) })
	t.Run("orphaning sees the dependents of a resource that recovered meanwhile", func(t *testing.T) { testOrphanSeesDependentsOfARecoveredResource(t, env) })
	t.Run("orphaning waits for the backlog of a watch that resumed, until a bookmark", func(t *testing.T) {
		testOrphanWaitsForAResumedWatchsBacklog(t, env, 0)
	})
	t.Run("orphaning waits for the backlog of a watch that resumed, until a relist", func(t *testing.T) {
		testOrphanWaitsForAResumedWatchsBacklog(t, env, 3*time.Second)
	})
	t.Run("orphaning refreshes discovery first", func(t *testing.T) { testOrphanWithUndiscoveredResource(t, env) })
	t.Run("a failing resource does not block the others", func(t *testing.T) { testFailingResource(t, env) })
	t.Run("a resource RBAC forbids counts as failed, the rest is collected", func(t *testing.T) { testResourceForbiddenByRBAC(t, env) })
	t.Run("an API group version never discovered is counted", func(t *testing.T) { testUnreadGroupVersion(t, env) })
	t.Run("a version that fails discovery keeps its monitor, alone", func(t *testing.T) { testVersionFailingDiscovery(t, env) })
	t.Run("a dependent of an owner whose kind left discovery", func(t *testing.T) { testOwnerKindLeftDiscovery(t, env) })
	t.Run("owners and dependents of a resource that left monitoring finish", func(t *testing.T) { testResourceLeftMonitoring(t, env) })
	t.Run("writes an admission policy denies are errors, not stale", func(t *testing.T) { testRefusedWrites(t, env) })
	t.Run("a write a webhook denies with a 404 is no proof of absence", func(t *testing.T) { testWebhookNotFoundIsNoProof(t, env) })
	t.Run("a write a webhook denies with a 409 is an error", func(t *testing.T) { testWebhookConflictIsAnError(t, env) })
	t.Run("a write the lease fence refuses while the run goes on is retried", func(t *testing.T) { testFenceRefusalRetried(t, env) })
	t.Run("a write whose webhook outlasts the write window fails and is retried", func(t *testing.T) { testWebhookOutlastsTheWriteWindow(t, env) })
}
