// Package headerprofile implements llm-d's header-profile-handler: the caller names the one
// scheduling profile to run in a request header. Coordinator deployments use it, where the
// caller knows the stage (encode, prefill, decode) and asks the EPP once per stage.
package headerprofile

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/log"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

const (
	// Type is llm-d's type name.
	Type = "header-profile-handler"
	// PhaseType is the name the handler had in llm-d's pull requests before it merged (its
	// header EPP-Phase), still in llm-d's coordinator guide: an alias with that header default.
	PhaseType = "header-phase-profile-handler"

	// DefaultHeaderName and DefaultProfile are llm-d's defaults.
	DefaultHeaderName = "EPP-Profile"
	DefaultProfile    = "decode"
	// PhaseHeaderName is the alias's header default.
	PhaseHeaderName = "EPP-Phase"
)

// Parameters are llm-d's parameters.
type Parameters struct {
	// HeaderName is the request header naming the profile (matched case-insensitively).
	HeaderName string `json:"headerName"`
	// DefaultProfile runs when the header is missing or blank (matched case-sensitively, as the
	// profile names are); unused when the config has a single profile.
	DefaultProfile string `json:"defaultProfile"`
}

// ParseParameters decodes strictly and applies the defaults of typ.
func ParseParameters(typ, name string, raw json.RawMessage) (Parameters, error) {
	p := Parameters{HeaderName: DefaultHeaderName, DefaultProfile: DefaultProfile}
	if typ == PhaseType {
		p.HeaderName = PhaseHeaderName
	}
	if err := pluginkit.Decode(typ, name, raw, &p); err != nil {
		return p, err
	}
	p.HeaderName = strings.TrimSpace(p.HeaderName)
	if p.HeaderName == "" {
		return p, pluginkit.Errorf(typ, name, "parameter headerName must not be empty")
	}
	if strings.TrimSpace(p.DefaultProfile) == "" {
		return p, pluginkit.Errorf(typ, name, "parameter defaultProfile must not be empty")
	}
	p.HeaderName = strings.ToLower(p.HeaderName)
	return p, nil
}

// Handler is header-profile-handler.
type Handler struct {
	tn     fwkplugin.TypedName
	params Parameters
}

var _ fwksched.ProfileHandler = (*Handler)(nil)

// Factory creates header-profile-handler.
func Factory(name string, raw json.RawMessage, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
	return newHandler(Type, name, raw)
}

// PhaseFactory creates the header-phase-profile-handler alias, logging its replacement.
func PhaseFactory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	h, err := newHandler(PhaseType, name, raw)
	if err != nil {
		return nil, err
	}
	log.FromContext(pluginkit.Context(handle)).Info("header-phase-profile-handler is the name llm-d's handler had before it merged: use header-profile-handler (header EPP-Profile)",
		"plugin", h.tn.String(), "header", h.params.HeaderName)
	return h, nil
}

func newHandler(typ, name string, raw json.RawMessage) (*Handler, error) {
	tn := pluginkit.TypedName(typ, name)
	p, err := ParseParameters(typ, tn.Name, raw)
	if err != nil {
		return nil, err
	}
	return &Handler{tn: tn, params: p}, nil
}

// TypedName implements fwkplugin.Plugin.
func (h *Handler) TypedName() fwkplugin.TypedName { return h.tn }

// Params returns the parameters in effect.
func (h *Handler) Params() Parameters { return h.params }

// Pick runs one profile: the only one configured, else the one the header names (the default
// profile when the header is missing or blank). A name the config lacks runs nothing, and
// ProcessResults answers it.
func (h *Handler) Pick(ctx context.Context, _ *fwksched.CycleState, request *fwksched.LLMRequest, profiles map[string]fwksched.SchedulerProfile,
	profileResults map[string]*fwksched.ProfileRunResult) map[string]fwksched.SchedulerProfile {
	if len(profileResults) > 0 {
		return map[string]fwksched.SchedulerProfile{}
	}
	if len(profiles) == 1 {
		return profiles
	}
	name := h.requested(request)
	if p, ok := profiles[name]; ok {
		return map[string]fwksched.SchedulerProfile{name: p}
	}
	// GIE's scheduler fails without asking ProcessResults when no profile ran: the answer is
	// recorded here.
	contract.Record(ctx, h.unknownProfile(name, profiles))
	return map[string]fwksched.SchedulerProfile{}
}

// unknownProfile is the 400 for a profile the configuration lacks.
func (h *Handler) unknownProfile(name string, profiles map[string]fwksched.SchedulerProfile) *contract.Answer {
	msg := fmt.Sprintf("header %s names scheduling profile %q, which the EPP's configuration does not have", h.params.HeaderName, name)
	if len(profiles) > 0 {
		names := make([]string, 0, len(profiles))
		for n := range profiles {
			names = append(names, n)
		}
		sort.Strings(names)
		msg += " (it has " + strings.Join(names, ", ") + ")"
	}
	return contract.NewAnswer(http.StatusBadRequest, contract.CauseUnknownProfile, "invalid_request_error", msg)
}

// ProcessResults makes the profile that ran primary. When none ran because the header named a
// profile the config lacks, the answer (recorded by Pick, returned here for a scheduler that
// asks) is a 400 naming the header and the value: llm-d answers such a request 429 without a reason (its scheduler error), which
// tells a client to retry what can never succeed.
func (h *Handler) ProcessResults(_ context.Context, _ *fwksched.CycleState, request *fwksched.LLMRequest,
	profileResults map[string]*fwksched.ProfileRunResult) (*fwksched.SchedulingResult, error) {
	for name, r := range profileResults {
		if r == nil {
			return nil, fmt.Errorf("failed to run scheduler profile '%s'", name)
		}
		return &fwksched.SchedulingResult{ProfileResults: profileResults, PrimaryProfileName: name}, nil
	}
	return nil, h.unknownProfile(h.requested(request), nil)
}

// requested is the profile the request asks for: the header, trimmed, or the default.
func (h *Handler) requested(request *fwksched.LLMRequest) string {
	if request == nil {
		return h.params.DefaultProfile
	}
	if v := strings.TrimSpace(protocol.HeaderValue(request.Headers, h.params.HeaderName)); v != "" {
		return v
	}
	return h.params.DefaultProfile
}
