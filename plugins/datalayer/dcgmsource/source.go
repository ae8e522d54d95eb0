// Package dcgmsource is llm-d's dcgm-data-source and dcgm-extractor: GPU utilisation scraped
// from NVIDIA's DCGM exporter (Prometheus text on port 9400) for every endpoint, written as
// the endpoint attribute GPUUtilization/dcgm-extractor (0..1, the busiest GPU of the pod) for
// endpoint-attribute-filter and endpoint-attribute-scorer. Wire the source and the extractor
// in dataLayer.sources, as llm-d's sim-epp-gpu-config.yaml does.
package dcgmsource

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	sourcemetrics "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/source/metrics"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/internal/scalar"
)

// Type names.
const (
	SourceType    = "dcgm-data-source"
	ExtractorType = "dcgm-extractor"
)

// GPUUtilizationKey is the attribute the extractor writes (llm-d's fixed key: the producer
// part does not follow the instance name).
var GPUUtilizationKey = scalar.Key("GPUUtilization", ExtractorType)

// UtilFamily is DCGM's GPU utilisation metric (percent).
const UtilFamily = "DCGM_FI_DEV_GPU_UTIL"

// SourceParameters are llm-d's parameters.
type SourceParameters struct {
	Scheme             string `json:"scheme"`
	Path               string `json:"path"`
	Port               *int   `json:"port"`
	InsecureSkipVerify *bool  `json:"insecureSkipVerify"`
	UseNodeAddress     bool   `json:"useNodeAddress"`
	Interval           string `json:"interval"`
}

// Source is dcgm-data-source.
type Source struct {
	tn       fwkplugin.TypedName
	scheme   string
	path     string
	port     string
	interval time.Duration
	client   *http.Client

	mu    sync.Mutex
	cache map[string]cached // endpoint → last poll within the interval
}

type cached struct {
	at   time.Time
	data sourcemetrics.PrometheusMetricMap
}

var _ fwkdl.PollingDataSource = (*Source)(nil)

// SourceFactory builds the source.
func SourceFactory(name string, raw json.RawMessage, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
	p := SourceParameters{Scheme: "http", Path: "/metrics"}
	if err := pluginkit.Decode(SourceType, name, raw, &p); err != nil {
		return nil, err
	}
	if p.Scheme != "http" && p.Scheme != "https" {
		return nil, fmt.Errorf("%s %q: parameter scheme=%q: must be http or https", SourceType, name, p.Scheme)
	}
	port := 9400
	if p.Port != nil {
		port = *p.Port
	}
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("%s %q: parameter port=%d: must be between 1 and 65535", SourceType, name, port)
	}
	if p.UseNodeAddress {
		// GIE v1.5.0's endpoint metadata has no node address (llm-d's NodeAddress, the pod's
		// status.hostIP): refuse rather than scrape the wrong host.
		return nil, fmt.Errorf("%s %q: parameter useNodeAddress=true is not supported: GIE v1.5.0 endpoints carry no node address; run the DCGM exporter reachable on the pod IP (e.g. as a sidecar) instead", SourceType, name)
	}
	var interval time.Duration
	if p.Interval != "" {
		d, err := time.ParseDuration(p.Interval)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("%s %q: parameter interval=%q: must be a non-negative duration", SourceType, name, p.Interval)
		}
		interval = d
	}
	skip := true
	if p.InsecureSkipVerify != nil {
		skip = *p.InsecureSkipVerify
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: skip} //nolint:gosec // llm-d's default, a parameter
	return &Source{tn: fwkplugin.TypedName{Type: SourceType, Name: orType(name, SourceType)}, scheme: p.Scheme, path: p.Path,
		port: strconv.Itoa(port), interval: interval, client: &http.Client{Transport: tr, Timeout: 5 * time.Second},
		cache: map[string]cached{}}, nil
}

func orType(name, typ string) string {
	if name == "" {
		return typ
	}
	return name
}

// TypedName implements fwkplugin.Plugin.
func (s *Source) TypedName() fwkplugin.TypedName { return s.tn }

// OutputType is Prometheus metric families (as metrics-data-source's).
func (s *Source) OutputType() reflect.Type { return sourcemetrics.PrometheusMetricType }

// ExtractorType is a polling extractor.
func (s *Source) ExtractorType() reflect.Type { return fwkdl.ExtractorType }

// Poll scrapes the endpoint's DCGM exporter; within interval of the last scrape it returns
// that one (the data layer ticks every --refresh-metrics-interval, DCGM samples every second).
func (s *Source) Poll(ctx context.Context, ep fwkdl.Endpoint) (any, error) {
	md := ep.GetMetadata()
	if md == nil {
		return nil, fmt.Errorf("%s: endpoint without metadata", SourceType)
	}
	key := md.NamespacedName.String()
	now := time.Now()
	if s.interval > 0 {
		s.mu.Lock()
		c, ok := s.cache[key]
		s.mu.Unlock()
		if ok && now.Sub(c.at) < s.interval {
			return c.data, nil
		}
	}
	u := url.URL{Scheme: s.scheme, Host: net.JoinHostPort(md.Address, s.port), Path: s.path}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", SourceType, err)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: scrape %s: %w", SourceType, u.String(), err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: scrape %s: status %d", SourceType, u.String(), resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: parse %s: %w", SourceType, u.String(), err)
	}
	if s.interval > 0 {
		s.mu.Lock()
		s.cache[key] = cached{at: now, data: families}
		s.mu.Unlock()
	}
	return families, nil
}

// Extractor is dcgm-extractor.
type Extractor struct{ tn fwkplugin.TypedName }

var _ fwkdl.Extractor = (*Extractor)(nil)

// ExtractorFactory builds the extractor; it takes no parameters.
func ExtractorFactory(name string, raw json.RawMessage, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
	if err := pluginkit.NoParameters(ExtractorType, name, raw); err != nil {
		return nil, err
	}
	return &Extractor{tn: fwkplugin.TypedName{Type: ExtractorType, Name: orType(name, ExtractorType)}}, nil
}

// TypedName implements fwkplugin.Plugin.
func (e *Extractor) TypedName() fwkplugin.TypedName { return e.tn }

// ExpectedInputType is Prometheus metric families.
func (e *Extractor) ExpectedInputType() reflect.Type { return sourcemetrics.PrometheusMetricType }

// Extract writes the busiest GPU's utilisation (0..1) among the samples labelled with the
// endpoint's pod (or with no pod label).
func (e *Extractor) Extract(_ context.Context, data any, ep fwkdl.Endpoint) error {
	families, ok := data.(sourcemetrics.PrometheusMetricMap)
	if !ok {
		return fmt.Errorf("%s: unexpected input %T", ExtractorType, data)
	}
	md := ep.GetMetadata()
	v, err := GPUUtilization(families, md)
	if err != nil {
		return err
	}
	ep.GetAttributes().Put(GPUUtilizationKey, &scalar.Value{V: v})
	return nil
}

// GPUUtilization is the extraction rule.
func GPUUtilization(families map[string]*dto.MetricFamily, md *fwkdl.EndpointMetadata) (float64, error) {
	fam := families[UtilFamily]
	if fam == nil {
		return 0, fmt.Errorf("%s: metric %s missing", ExtractorType, UtilFamily)
	}
	pod := ""
	if md != nil {
		pod = md.PodName
		if pod == "" {
			pod = md.NamespacedName.Name
		}
	}
	best, found := 0.0, false
	for _, m := range fam.GetMetric() {
		podLabel, has := "", false
		for _, l := range m.GetLabel() {
			if l.GetName() == "pod" {
				podLabel, has = l.GetValue(), true
			}
		}
		if has && podLabel != pod {
			continue
		}
		var v float64
		switch {
		case m.GetGauge() != nil:
			v = m.GetGauge().GetValue()
		case m.GetUntyped() != nil:
			v = m.GetUntyped().GetValue()
		case m.GetCounter() != nil:
			v = m.GetCounter().GetValue()
		default:
			continue
		}
		if !found || v > best {
			best, found = v, true
		}
	}
	if !found {
		return 0, fmt.Errorf("%s: no %s sample for pod %q", ExtractorType, UtilFamily, pod)
	}
	return best / 100, nil
}
