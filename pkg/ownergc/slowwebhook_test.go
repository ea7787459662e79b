package ownergc

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// testWebhookOutlastsTheWriteWindow: against kube-apiserver, an admission
// webhook takes longer to answer the owner GC's DELETE of slow-d than the
// write window had left when it was sent (3 s left, the webhook 6 s). The
// write carries a server-side timeout ending with the window, so
// kube-apiserver gives it up: the DELETE fails and is retried, and slow-d
// is never deleted after its window closed, however late the webhook
// allows it; once the webhook answers in time, slow-d is collected. Were
// the timeout missing (kube-apiserver's default is 60 s), the first DELETE
// would be applied when the webhook allowed it, 6 s after it was sent:
// after the window closed, when another instance may hold the lease.
func testWebhookOutlastsTheWriteWindow(t *testing.T, env *itEnv) {
	ctx := t.Context()
	ns := env.namespace(t, "slowwebhook")
	const window, delay = 3 * time.Second, 6 * time.Second

	var slow atomic.Bool
	slow.Store(true)
	var calls, allowedLate atomic.Int32
	wh := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(req.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		if review.Request.Namespace == ns && review.Request.Name == "slow-d" && review.Request.Operation == admissionv1.Delete {
			calls.Add(1)
			if slow.Load() {
				select {
				case <-time.After(delay):
					allowedLate.Add(1)
				case <-req.Context().Done():
				}
			}
		}
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		review.Request = nil
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(review)
	}))
	t.Cleanup(wh.Close)
	ar := env.cs.AdmissionregistrationV1()
	name := "ownergc-" + ns
	_, err := ar.ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "slow.example.com",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To(wh.URL + "/validate"),
				CABundle: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: wh.Certificate().Raw})},
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			// Ignore: a webhook call that fails lets the write through,
			// so only the write's own timeout can stop it.
			FailurePolicy:     ptr.To(admissionregistrationv1.Ignore),
			TimeoutSeconds:    ptr.To(int32(15)),
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ar.ValidatingWebhookConfigurations().Delete(ctx, name, metav1.DeleteOptions{}) })

	// Every write is sent with window left: its timeout ends with it.
	var sentAt atomic.Int64
	gc := env.startCollectorWith(t, Options{Config: testConfig(), RESTConfig: env.c.RESTConfig(), WriteWindow: func() time.Duration { return window }})
	owner := env.configMap(t, ns, "owner", nil)
	d := env.configMap(t, ns, "slow-d", []metav1.OwnerReference{cmRef(owner, false)})
	gc.waitObserved(t, d.UID, d.ResourceVersion)
	gc.beforeWrite.Store(ns, func(action string, id objectID) {
		if action == actDelete.String() && id.uid == d.UID {
			sentAt.CompareAndSwap(0, time.Now().UnixNano())
		}
	})
	gone := env.cmGone(ns, "slow-d")
	env.deleteCM(t, ns, "owner", metav1.DeletePropagationBackground)

	// The first DELETE's webhook call, then its retry's: slow-d must stay
	// through both, and past the time the first webhook call allowed it.
	eventually(t, 60*time.Second, "two DELETEs of slow-d reaching the slow webhook, or slow-d deleted", func(ctx context.Context) (bool, error) {
		g, err := gone(ctx)
		return g || calls.Load() >= 2, err
	})
	time.Sleep(delay + time.Second) // the first webhook call has answered by now, if it ever does
	if g, err := gone(ctx); err != nil || g {
		t.Fatalf("slow-d deleted (%v, err %v) while every DELETE's webhook outlasted the write window; first DELETE sent %v ago",
			g, err, time.Since(time.Unix(0, sentAt.Load())).Round(time.Millisecond))
	}
	if n := counterByLabel(t, gc.reg, "nodegc_owner_gc_action_errors_total", "action")[actDelete.String()]; n < 1 {
		t.Errorf("%v delete action errors, want the timed-out DELETEs counted", n)
	}
	if !strings.Contains(gc.logs.String(), "slow-d") {
		t.Error("no log line names slow-d's failed DELETE")
	}

	slow.Store(false)
	eventually(t, 60*time.Second, "slow-d collected once the webhook answers in time", func(ctx context.Context) (bool, error) {
		return gone(ctx)
	})
	t.Logf("%d DELETEs reached the webhook, %d of its answers came after the write's window", calls.Load(), allowedLate.Load())
}
