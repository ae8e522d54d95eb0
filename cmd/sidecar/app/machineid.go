package app

import (
	"fmt"
	"strconv"
	"strings"
)

// trtMachineIDs is the size of TensorRT-LLM's Snowflake machine field (10 bits).
const trtMachineIDs = 1024

// statefulSetOrdinal returns the ordinal a StatefulSet pod name ends with ("<set>-<n>",
// decimal without leading zeros, as the StatefulSet controller names its pods).
func statefulSetOrdinal(podName string) (int, error) {
	i := strings.LastIndexByte(podName, '-')
	if i <= 0 || i == len(podName)-1 {
		return 0, fmt.Errorf("pod name %q does not end in a StatefulSet ordinal (-<n>)", podName)
	}
	s := podName[i+1:]
	if len(s) > 1 && s[0] == '0' {
		return 0, fmt.Errorf("pod name %q does not end in a StatefulSet ordinal (-<n>): %q has a leading zero", podName, s)
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("pod name %q does not end in a StatefulSet ordinal (-<n>)", podName)
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("pod name %q: ordinal %q: %w", podName, s, err)
	}
	return n, nil
}

// deriveTRTMachineID gives a StatefulSet's sidecar its TensorRT-LLM machine id: the set owns
// the ids [base, base+slots), and the pod with ordinal k takes base+k. A StatefulSet never
// runs two pods with one ordinal, so the ids of one set are distinct; sets given disjoint
// ranges (the Helm chart does) never share one; and a pod whose ordinal is outside its
// range (the set was scaled past what its range was computed for) is refused, because its
// id would be another set's.
func deriveTRTMachineID(base, slots int, podName string) (int, error) {
	if slots < 1 || base < 0 || base+slots > trtMachineIDs {
		return 0, fmt.Errorf("--trt-machine-id %d with --trt-machine-id-slots %d: the range [%d,%d) must lie in [0,%d)",
			base, slots, base, base+slots, trtMachineIDs)
	}
	if podName == "" {
		return 0, fmt.Errorf("--trt-machine-id-slots %d needs the pod's name to read its StatefulSet ordinal: set --pod-name or the POD_NAME variable (downward API metadata.name)", slots)
	}
	k, err := statefulSetOrdinal(podName)
	if err != nil {
		return 0, fmt.Errorf("--trt-machine-id-slots %d: %w", slots, err)
	}
	if k >= slots {
		return 0, fmt.Errorf("--trt-machine-id-slots %d: pod %q has ordinal %d, outside its StatefulSet's %d machine ids [%d,%d); "+
			"its id would collide with another set's: scale the StatefulSet through the chart's values so that the ranges are recomputed",
			slots, podName, k, slots, base, base+slots)
	}
	return base + k, nil
}

// TRTMachineIDInEffect is the TensorRT-LLM machine id the sidecar's request ids use, known
// once Validate succeeded (--trt-machine-id, plus the pod's ordinal with
// --trt-machine-id-slots).
func (o *Options) TRTMachineIDInEffect() int { return o.trtMachineID }
