package podmodel

import (
	"strings"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// AnnotationServedModels declares the exact model names a pod serves, comma-separated
// (base models and LoRA adapters: "meta-llama/Llama-3.1-8B-Instruct,sql-lora"). An annotation,
// not a label: model names carry "/" and exceed 63 characters, which label values cannot.
// pdgate extension; the EPP answers 404 for a model no pod serves only when every pod of the
// pool declares (docs/operations.md, "Error answers").
const AnnotationServedModels = "pdgate.io/served-models"

// annotationServedModels is where the EPP mirrors it among the endpoint's labels.
const annotationServedModels = protocol.AnnotationLabelPrefix + AnnotationServedModels

// ServesModel reports whether an endpoint with these labels declares the models it serves
// (the pdgate.io/served-models annotation, mirrored into labels, or the same key as a label)
// and, if it does, whether model is among them. An endpoint that declares nothing may serve
// anything: declared is false.
func ServesModel(labels map[string]string, model string) (serves, declared bool) {
	v, ok := labels[annotationServedModels]
	if !ok {
		v, ok = labels[AnnotationServedModels]
	}
	if !ok {
		return false, false
	}
	for v != "" {
		var name string
		name, v, _ = strings.Cut(v, ",")
		if strings.TrimSpace(name) == model {
			return true, true
		}
	}
	return false, true
}
