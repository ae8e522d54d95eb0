package podmodel

import "testing"

func TestServesModel(t *testing.T) {
	tests := []struct {
		name             string
		labels           map[string]string
		model            string
		serves, declared bool
	}{
		{"no declaration", map[string]string{"app": "x"}, "m", false, false},
		{"annotation, served", map[string]string{"annotation.pdgate.io/pdgate.io/served-models": "meta-llama/Llama-3.1-8B, sql-lora"}, "sql-lora", true, true},
		{"annotation, exact name with slash", map[string]string{"annotation.pdgate.io/pdgate.io/served-models": "meta-llama/Llama-3.1-8B"}, "meta-llama/Llama-3.1-8B", true, true},
		{"annotation, not served", map[string]string{"annotation.pdgate.io/pdgate.io/served-models": "a,b"}, "c", false, true},
		{"no prefix match", map[string]string{"annotation.pdgate.io/pdgate.io/served-models": "model-a"}, "model", false, true},
		{"label form", map[string]string{"pdgate.io/served-models": "m"}, "m", true, true},
		{"empty declaration serves nothing", map[string]string{"pdgate.io/served-models": ""}, "m", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, d := ServesModel(tt.labels, tt.model)
			if s != tt.serves || d != tt.declared {
				t.Fatalf("ServesModel = %v, %v; want %v, %v", s, d, tt.serves, tt.declared)
			}
		})
	}
}
