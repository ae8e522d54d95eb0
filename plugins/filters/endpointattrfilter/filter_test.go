package endpointattrfilter

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"github.com/pdgate/pdgate/plugins/internal/scalar"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

const gpuConfig = `{"attribute":"GPUUtilization","producer":"dcgm-extractor","onMissing":"Pass","fallbackOnEmpty":true,
  "algorithm":{"type":"threshold","threshold":{"operator":"LessThanOrEqual","value":0.90}}}`

func ep(name string, v float64) fwksched.Endpoint {
	e := eptest.Scheduling(eptest.Spec{Name: name, NoMetrics: true})
	if v >= 0 {
		e.Put(scalar.Key("GPUUtilization", "dcgm-extractor"), &scalar.Value{V: v})
	}
	return e
}

func TestFilter(t *testing.T) {
	f, err := Factory("gpu", json.RawMessage(gpuConfig), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := f.(*Filter).Filter(context.Background(), nil, nil, []fwksched.Endpoint{ep("cool", 0.5), ep("edge", 0.9), ep("hot", 0.95), ep("unknown", -1)})
	if plugintest.Names(got) != "cool,edge,unknown" {
		t.Fatalf("kept %s", plugintest.Names(got))
	}
	all := []fwksched.Endpoint{ep("hot", 0.95), ep("hotter", 1)}
	if got := f.(*Filter).Filter(context.Background(), nil, nil, all); plugintest.Names(got) != "hot,hotter" {
		t.Fatalf("fallbackOnEmpty: kept %s", plugintest.Names(got))
	}
}

func TestParameters(t *testing.T) {
	for raw, want := range map[string]string{
		`{"producer":"p","algorithm":{"type":"threshold","threshold":{"operator":"LessThan","value":1}}}`:          "attribute",
		`{"attribute":"a","producer":"p","algorithm":{"type":"range"}}`:                                            "algorithm.type",
		`{"attribute":"a","producer":"p","algorithm":{"type":"threshold","threshold":{"operator":"<","value":1}}}`: "operator",
		`{"attribute":"a","producer":"p","onMissing":"Keep","algorithm":{"type":"threshold"}}`:                     "onMissing",
	} {
		if _, err := Factory("f", json.RawMessage(raw), nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want %s", raw, err, want)
		}
	}
}
