package contract

// ReplicaAdvisor is implemented by plugins that say how many replicas each role of a pool
// should run for the demand they measure (pd-ratio-advisor). An autoscaler outside the EPP
// reads the same figures from the plugin's gauges; the simulation's replica actuator reads
// them through this interface, so it never names the plugin's type.
type ReplicaAdvisor interface {
	// ReplicaAdvice is the advice now, one entry per pool and role, in a stable order.
	ReplicaAdvice() []ReplicaAdvice
}

// ReplicaAdvice is one role's advised size.
type ReplicaAdvice struct {
	Pool string
	// Role is prefill, decode or encode.
	Role string
	// Replicas is the replica count the advisor would run (after its hysteresis).
	Replicas int
	// Reason says why (the advisor's README lists the values).
	Reason string
}

// ReasonNoData is the reason of advice that only repeats the current size: the advisor has
// measured too little to estimate.
const ReasonNoData = "no_data"
