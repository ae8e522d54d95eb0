// Package alwaysdisagg holds llm-d's two parameterless deciders: always-disagg-pd-decider
// (approves P/D for every request) and always-disagg-multimodal-decider (approves the encode
// stage for chat requests carrying image, video or audio blocks).
package alwaysdisagg

import (
	"context"
	"encoding/json"
	"fmt"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// Plugin type names.
const (
	PDType         = "always-disagg-pd-decider"
	MultimodalType = "always-disagg-multimodal-decider"
)

// Multimodal content block types that trigger the encode stage.
var multimodalBlockTypes = map[string]bool{"image_url": true, "video_url": true, "input_audio": true}

// PDDecider approves P/D disaggregation for every request.
type PDDecider struct{ typedName fwkplugin.TypedName }

// PDFactory creates always-disagg-pd-decider. Parameters are ignored, as in llm-d.
func PDFactory(name string, _ json.RawMessage, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
	return &PDDecider{typedName: fwkplugin.TypedName{Type: PDType, Name: name}}, nil
}

// TypedName implements fwkplugin.Plugin.
func (d *PDDecider) TypedName() fwkplugin.TypedName { return d.typedName }

var _ contract.StageClassifier = (*PDDecider)(nil)

// DecodeOnlyAtAdmission implements contract.StageClassifier: every request is disaggregated.
func (d *PDDecider) DecodeOnlyAtAdmission(*fwksched.LLMRequest) bool { return false }

// Disaggregate always approves.
func (d *PDDecider) Disaggregate(ctx context.Context, _ *fwksched.CycleState, request *fwksched.LLMRequest, _ fwksched.Endpoint) contract.Decision {
	if request != nil {
		if logger := pluginkit.DebugLogger(ctx); logger.Enabled() {
			logger.Info("always disaggregate", "plugin", d.typedName.String(), "requestID", request.RequestId)
		}
	}
	return contract.Decision{Run: true, Cause: contract.CauseAlways, Reason: "always disaggregate"}
}

// MultimodalDecider approves the encode stage for chat requests with multimodal blocks.
type MultimodalDecider struct{ typedName fwkplugin.TypedName }

// MultimodalFactory creates always-disagg-multimodal-decider. Parameters are ignored.
func MultimodalFactory(name string, _ json.RawMessage, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
	return &MultimodalDecider{typedName: fwkplugin.TypedName{Type: MultimodalType, Name: name}}, nil
}

// TypedName implements fwkplugin.Plugin.
func (d *MultimodalDecider) TypedName() fwkplugin.TypedName { return d.typedName }

// Disaggregate approves when the chat request carries image_url, video_url or input_audio blocks.
func (d *MultimodalDecider) Disaggregate(ctx context.Context, _ *fwksched.CycleState, request *fwksched.LLMRequest, _ fwksched.Endpoint) contract.Decision {
	n := CountMultimodal(request)
	dec := contract.Decision{Cause: contract.CauseNoMultimodal, Reason: "no multimodal content (image_url, video_url, input_audio)"}
	if n > 0 {
		dec = contract.Decision{Run: true, Cause: contract.CauseMultimodal, Reason: fmt.Sprintf("%d multimodal block(s)", n)}
	}
	if request != nil {
		if logger := pluginkit.DebugLogger(ctx); logger.Enabled() {
			logger.Info("multimodal encode decision", "plugin", d.typedName.String(), "requestID", request.RequestId, "blocks", n)
		}
	}
	return dec
}

// HasMultimodalContent reports whether a chat request carries a multimodal block.
func HasMultimodalContent(request *fwksched.LLMRequest) bool { return CountMultimodal(request) > 0 }

// CountMultimodal counts the multimodal blocks of a chat request (0 for other APIs).
func CountMultimodal(request *fwksched.LLMRequest) int {
	if request == nil || request.Body == nil || request.Body.ChatCompletions == nil {
		return 0
	}
	n := 0
	for _, m := range request.Body.ChatCompletions.Messages {
		for _, b := range m.Content.Structured {
			if multimodalBlockTypes[b.Type] {
				n++
			}
		}
	}
	return n
}
