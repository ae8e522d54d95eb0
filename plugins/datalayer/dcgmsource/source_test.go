package dcgmsource

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/pdgate/pdgate/plugins/internal/scalar"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

const exposition = `# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",pod="vllm-0"} 35
DCGM_FI_DEV_GPU_UTIL{gpu="1",pod="vllm-0"} 80
DCGM_FI_DEV_GPU_UTIL{gpu="2",pod="other"} 99
`

func TestScrapeAndExtract(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, exposition)
	}))
	defer srv.Close()
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	p, _ := strconv.Atoi(port)
	src, err := SourceFactory("dcgm", json.RawMessage(fmt.Sprintf(`{"port":%d,"interval":"1h"}`, p)), nil)
	if err != nil {
		t.Fatal(err)
	}
	ext, err := ExtractorFactory("dcgm-extractor", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ep := eptest.Data(eptest.Spec{Name: "vllm-0-rank-0", PodName: "vllm-0", Address: host, Port: "8000", NoMetrics: true})
	for i := 0; i < 3; i++ {
		data, err := src.(*Source).Poll(context.Background(), ep)
		if err != nil {
			t.Fatal(err)
		}
		if err := ext.(*Extractor).Extract(context.Background(), data, ep); err != nil {
			t.Fatal(err)
		}
	}
	if v, ok := scalar.Read(ep.GetAttributes(), GPUUtilizationKey); !ok || v != 0.8 {
		t.Fatalf("GPUUtilization %v,%v want 0.8 (the pod's busiest GPU)", v, ok)
	}
	if hits.Load() != 1 {
		t.Fatalf("%d scrapes within the interval, want 1", hits.Load())
	}
}

func TestSourceParameters(t *testing.T) {
	for raw, want := range map[string]string{
		`{"scheme":"ftp"}`:        "scheme",
		`{"port":0}`:              "port",
		`{"useNodeAddress":true}`: "useNodeAddress",
		`{"interval":"soon"}`:     "interval",
		`{"intervall":"1s"}`:      "intervall",
	} {
		if _, err := SourceFactory("d", json.RawMessage(raw), nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want %s", raw, err, want)
		}
	}
}
