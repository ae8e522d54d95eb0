package pluginkit

import (
	"encoding/json"
	"testing"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
)

type namedPlugin struct{ tn fwkplugin.TypedName }

func (p *namedPlugin) TypedName() fwkplugin.TypedName { return p.tn }

func TestBuildAndTypedName(t *testing.T) {
	parse := func(name string, raw json.RawMessage) (string, error) {
		if string(raw) == "bad" {
			return "", Errorf("t", name, "invalid parameters")
		}
		return string(raw), nil
	}
	build := func(name, c string) *namedPlugin { return &namedPlugin{TypedName("t", name+c)} }
	p, err := Build("n", json.RawMessage("-x"), parse, build)
	if err != nil || p.TypedName() != (fwkplugin.TypedName{Type: "t", Name: "n-x"}) {
		t.Fatalf("Build = %v, %v", p, err)
	}
	if p, err := Build("n", json.RawMessage("bad"), parse, build); p != nil || err == nil || err.Error() != `t "n": invalid parameters` {
		t.Fatalf("Build of bad parameters = %v, %v", p, err)
	}
	if tn := TypedName("t", ""); tn.Name != "t" {
		t.Fatalf("unnamed instance: %v, want the type's name", tn)
	}
}
