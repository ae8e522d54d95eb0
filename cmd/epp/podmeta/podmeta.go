// Package podmeta carries pod annotations into GIE endpoint labels. GIE's EndpointMetadata has
// labels only; pdgate plugins need annotations such as model.aibrix.ai/config, so the EPP
// mirrors every annotation under protocol.AnnotationLabelPrefix in both modes.
package podmeta

import (
	"maps"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// MirrorAnnotations returns a new label map: the labels plus every annotation under
// protocol.AnnotationLabelPrefix. A real label with a prefixed key is overwritten: the
// prefixed namespace belongs to the mirror.
func MirrorAnnotations(labels, annotations map[string]string) map[string]string {
	out := make(map[string]string, len(labels)+len(annotations))
	maps.Copy(out, labels)
	for k, v := range annotations {
		out[protocol.AnnotationLabelPrefix+k] = v
	}
	return out
}
