package latencyobserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// Parameters are llm-d's.
type Parameters struct {
	IntervalDuration         metav1.Duration `json:"intervalDuration"`
	MaxObservationAge        metav1.Duration `json:"maxObservationAge"`
	MaxRequests              int             `json:"maxRequests"`
	MinRequests              int             `json:"minRequests"`
	LowPercentile            float64         `json:"lowPercentile"`
	TypicalPercentile        float64         `json:"typicalPercentile"`
	WindowSize               int             `json:"windowSize"`
	BucketDuration           metav1.Duration `json:"bucketDuration"`
	BucketHistorySize        int             `json:"bucketHistorySize"`
	InFlightLoadProducerName string          `json:"inFlightLoadProducerName"`
}

// Validate applies llm-d's rules: every number > 0, maxRequests ≤ windowSize,
// 0 < lowPercentile < typicalPercentile < 100, bucketHistorySize ≥ 2.
func (p *Parameters) Validate() error {
	var errs []error
	positive := func(field string, ok bool, v any) {
		if !ok {
			errs = append(errs, fmt.Errorf("%s must be > 0, got %v", field, v))
		}
	}
	positive("intervalDuration", p.IntervalDuration.Duration > 0, p.IntervalDuration.Duration)
	positive("maxObservationAge", p.MaxObservationAge.Duration > 0, p.MaxObservationAge.Duration)
	positive("maxRequests", p.MaxRequests > 0, p.MaxRequests)
	positive("minRequests", p.MinRequests > 0, p.MinRequests)
	positive("windowSize", p.WindowSize > 0, p.WindowSize)
	positive("bucketDuration", p.BucketDuration.Duration > 0, p.BucketDuration.Duration)
	if p.MaxRequests > p.WindowSize {
		errs = append(errs, fmt.Errorf("maxRequests (%d) must be <= windowSize (%d)", p.MaxRequests, p.WindowSize))
	}
	if !(0 < p.LowPercentile && p.LowPercentile < p.TypicalPercentile && p.TypicalPercentile < 100) {
		errs = append(errs, fmt.Errorf("lowPercentile (%g) and typicalPercentile (%g) must satisfy 0 < low < typical < 100", p.LowPercentile, p.TypicalPercentile))
	}
	if p.BucketHistorySize < 2 {
		errs = append(errs, fmt.Errorf("bucketHistorySize must be >= 2, got %d", p.BucketHistorySize))
	}
	return errors.Join(errs...)
}

// DefaultParameters are llm-d's defaults.
func DefaultParameters() Parameters {
	return Parameters{
		IntervalDuration:  metav1.Duration{Duration: time.Second},
		MaxObservationAge: metav1.Duration{Duration: 3 * time.Minute},
		MaxRequests:       100,
		MinRequests:       10,
		LowPercentile:     25,
		TypicalPercentile: 50,
		WindowSize:        5000,
		BucketDuration:    metav1.Duration{Duration: time.Minute},
		BucketHistorySize: 1000,
	}
}

// ParseParameters decodes, defaults and validates; errors name the plugin and the field.
func ParseParameters(name string, raw json.RawMessage) (p Parameters, err error) {
	p = DefaultParameters()
	return p, pluginkit.Decode(Type, name, raw, &p)
}
