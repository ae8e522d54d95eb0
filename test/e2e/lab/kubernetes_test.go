package lab_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pdgate/pdgate/test/testsupport/kubetest"
)

// `pdgate lab --kubernetes`: the default topology with the EPP in Kubernetes mode against a
// local kube-apiserver and etcd, the InferencePool and pods created through the API. A chat
// workload gets only 200s, and requests are disaggregated (prefill-decode decisions naming
// lab pods through GIE's Kubernetes-mode endpoint names); the EPP and the sidecars' allow-lists
// follow the pool through the API.
func TestLabKubernetes(t *testing.T) {
	assets := kubetest.NeedAssets(t)
	bin := binDir(t)
	runDir := t.TempDir()
	s := runLab(t, bin, "--kubernetes", "--kubebuilder-assets", assets,
		"--topology", filepath.Join(repoRoot, "config/lab/default.yaml"), "--bin-dir", bin,
		"--subnet", "127.0.79", "--port", "0", "--run-dir", runDir,
		"--workload", "chat", "--duration", "5s", "--concurrency", "4", "--max-tokens-cap", "16")
	t.Logf("sent %d, statuses %v, decisions %v, legs %v", s.RequestsSent, s.ResponsesByStatus, s.Decisions, s.PodLegs)
	if s.RequestsSent < 5 || s.ResponsesByStatus["200"] != s.RequestsSent {
		t.Errorf("want >= 5 requests, all 200: sent %d, statuses %v", s.RequestsSent, s.ResponsesByStatus)
	}
	if s.Hung != 0 || s.TransportErrors != 0 || s.StreamErrors != 0 {
		t.Errorf("hung %d, transport errors %d, stream errors %d", s.Hung, s.TransportErrors, s.StreamErrors)
	}
	if s.Decisions["prefill-decode"] == 0 || s.Decisions["unknown"] != 0 || s.Decisions["untraced"] != 0 {
		t.Errorf("want prefill-decode decisions naming lab pods, got %v", s.Decisions)
	}
	// The EPP ran in Kubernetes mode on the lab's pool, not on an endpoints file.
	log, err := os.ReadFile(filepath.Join(runDir, "epp.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "default/pdgate-lab") || !strings.Contains(string(log), "(kubernetes") {
		t.Errorf("epp.log does not show Kubernetes mode on pool default/pdgate-lab")
	}
	// The vLLM sidecars' allow-lists follow the pool through the API.
	if sc, err := os.ReadFile(filepath.Join(runDir, "sidecar-decode-a-0.log")); err != nil || !strings.Contains(string(sc), "allow-list follows an InferencePool") {
		t.Errorf("sidecar-decode-a-0's allow-list does not follow the InferencePool (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(runDir, "endpoints.yaml")); err == nil {
		t.Errorf("Kubernetes mode wrote an endpoints file")
	}
}
