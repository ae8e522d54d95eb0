package kubetest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestAssets(t *testing.T) {
	full := t.TempDir()
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if err := os.WriteFile(filepath.Join(full, b), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	half := t.TempDir()
	if err := os.WriteFile(filepath.Join(half, "etcd"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, dir, ci        string
		wantSkip, wantErrSub string
	}{
		{name: "both binaries", dir: full},
		{name: "missing kube-apiserver skips", dir: half, wantSkip: "no kube-apiserver in " + half},
		{name: "missing under CI fails", dir: half, ci: "true", wantErrSub: "CI is set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("KUBEBUILDER_ASSETS", tt.dir)
			t.Setenv("CI", tt.ci)
			dir, skip, err := Assets()
			if dir != tt.dir {
				t.Errorf("dir %q, want %q", dir, tt.dir)
			}
			if tt.wantErrSub != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErrSub) || skip != "" {
					t.Fatalf("err %v skip %q, want an error with %q", err, skip, tt.wantErrSub)
				}
				return
			}
			if err != nil || !strings.HasPrefix(skip, tt.wantSkip) || (tt.wantSkip == "") != (skip == "") {
				t.Fatalf("skip %q err %v, want skip %q", skip, err, tt.wantSkip)
			}
		})
	}
}

func TestPodStatus(t *testing.T) {
	for _, ready := range []bool{true, false} {
		s := PodStatus("127.0.0.5", ready)
		want := corev1.ConditionFalse
		if ready {
			want = corev1.ConditionTrue
		}
		if s.Phase != corev1.PodRunning || s.PodIP != "127.0.0.5" || len(s.PodIPs) != 1 || s.PodIPs[0].IP != "127.0.0.5" ||
			len(s.Conditions) != 1 || s.Conditions[0].Type != corev1.PodReady || s.Conditions[0].Status != want {
			t.Errorf("ready=%v: %+v", ready, s)
		}
	}
}
