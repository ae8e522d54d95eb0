package app

import (
	"strings"
	"testing"

	"github.com/go-logr/logr"
)

// Three replicas of each of two StatefulSets with the disjoint ranges the chart gives them get
// six distinct machine ids; names that are not StatefulSet pods, ordinals past the range and
// ranges past the 10-bit field are refused.
func TestDeriveTRTMachineID(t *testing.T) {
	tests := []struct {
		base, slots int
		pod         string
		want        int
		wantErr     string
	}{
		{base: 0, slots: 3, pod: "r-trtllm-decode-group-0-0", want: 0},
		{base: 0, slots: 3, pod: "r-trtllm-decode-group-0-1", want: 1},
		{base: 0, slots: 3, pod: "r-trtllm-decode-group-0-2", want: 2},
		{base: 3, slots: 3, pod: "r-trtllm-combined-0", want: 3},
		{base: 3, slots: 3, pod: "r-trtllm-combined-1", want: 4},
		{base: 3, slots: 3, pod: "r-trtllm-combined-2", want: 5},
		{base: 1000, slots: 24, pod: "s-23", want: 1023},
		{base: 0, slots: 3, pod: "r-trtllm-decode-group-0-3", wantErr: "ordinal 3, outside"},
		{base: 0, slots: 3, pod: "r-trtllm-decode-group-0-7d9f8b6c4-x2k9p", wantErr: "does not end in a StatefulSet ordinal"},
		{base: 0, slots: 3, pod: "r-01", wantErr: "leading zero"},
		{base: 0, slots: 3, pod: "r-", wantErr: "does not end in a StatefulSet ordinal"},
		{base: 0, slots: 3, pod: "7", wantErr: "does not end in a StatefulSet ordinal"},
		{base: 0, slots: 3, pod: "", wantErr: "POD_NAME"},
		{base: 1000, slots: 25, pod: "s-0", wantErr: "[1000,1025) must lie in [0,1024)"},
		{base: -1, slots: 2, pod: "s-0", wantErr: "must lie in"},
	}
	seen := map[int]string{}
	for _, tt := range tests {
		got, err := deriveTRTMachineID(tt.base, tt.slots, tt.pod)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("(%d, %d, %q): err %v, want %q", tt.base, tt.slots, tt.pod, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("(%d, %d, %q) = %d, %v; want %d", tt.base, tt.slots, tt.pod, got, err, tt.want)
			continue
		}
		if other, dup := seen[got]; dup {
			t.Errorf("%q and %q share machine id %d", other, tt.pod, got)
		}
		seen[got] = tt.pod
	}
}

// The derived id is the one the proxy's request ids use; without --trt-machine-id-slots the
// flag is the id, and another engine ignores the slots.
func TestTRTMachineIDInEffect(t *testing.T) {
	tests := []struct {
		name    string
		engine  string
		base    int
		slots   int
		pod     string
		want    int
		wantErr string
	}{
		{name: "fixed id", engine: "trtllm", base: 7, want: 7},
		{name: "ordinal 2 of 3 from 10", engine: "trtllm", base: 10, slots: 3, pod: "rel-trtllm-decode-g-2", want: 12},
		{name: "scaled past its range", engine: "trtllm", base: 10, slots: 3, pod: "rel-trtllm-decode-g-3", wantErr: "outside"},
		{name: "Deployment pod", engine: "trtllm", base: 0, slots: 3, pod: "rel-trtllm-decode-g-5d4f9c7b8-abcde", wantErr: "StatefulSet ordinal"},
		{name: "vllm ignores slots", engine: "vllm", base: 0, slots: 3, pod: "not-a-statefulset-pod-x", want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("AIBRIX_TRT_MACHINE_ID", "")
			o := NewOptions()
			o.Engine, o.AllowlistDisable = tt.engine, true
			o.TRTMachineID, o.TRTMachineIDSlots, o.PodName = tt.base, tt.slots, tt.pod
			err := o.Validate()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := o.proxyConfig(logr.Discard(), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.TRTMachineID != tt.want || o.TRTMachineIDInEffect() != tt.want {
				t.Fatalf("proxy machine id %d (in effect %d), want %d", cfg.TRTMachineID, o.TRTMachineIDInEffect(), tt.want)
			}
		})
	}
}

func TestPodNameFromEnvironment(t *testing.T) {
	t.Setenv("POD_NAME", "rel-trtllm-decode-g-1")
	if o := NewOptions(); o.PodName != "rel-trtllm-decode-g-1" {
		t.Fatalf("PodName %q, want POD_NAME's value", o.PodName)
	}
}
