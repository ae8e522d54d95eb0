package disaggprofile

import (
	"fmt"
	"slices"
	"strings"
)

// resolveDecodeProfile is the decode-profile rule both handlers share. llm-d's decode-only
// examples declare the handler and no schedulingProfiles; GIE then builds one profile named
// "default", and a handler looking for "decode" would fail every request. So when the named
// decode profile is missing and exactly one profile exists, that profile is decode. Any other
// missing decode profile is a configuration error naming the plugin and the profile.
func resolveDecodeProfile(plugin, decode string, configured []string) (string, error) {
	if slices.Contains(configured, decode) {
		return decode, nil
	}
	if len(configured) == 1 {
		return configured[0], nil
	}
	sorted := slices.Clone(configured)
	slices.Sort(sorted)
	return "", fmt.Errorf("plugin %s: decode profile %q is not configured (scheduling profiles: %s); "+
		"name a profile %q or set the handler's decode profile parameter", plugin, decode, strings.Join(sorted, ", "), decode)
}

// CheckProfiles implements contract.ProfileChecker.
func (h *Handler) CheckProfiles(configured []string) error {
	decode, err := resolveDecodeProfile(h.typedName.String(), h.params.Profiles.Decode, configured)
	if err != nil {
		return err
	}
	if decode != h.params.Profiles.Decode {
		h.log.Info("decode profile not configured; the only scheduling profile serves as decode",
			"plugin", h.typedName.String(), "want", h.params.Profiles.Decode, "using", decode)
		h.params.Profiles.Decode = decode
	}
	h.noteMissingStages(configured)
	return nil
}

// noteMissingStages logs, once at start, a decider whose stage has no profile: the stage then
// never runs (decode-only), which is what llm-d's decider-without-profiles example does.
func (h *Handler) noteMissingStages(configured []string) {
	for _, st := range []struct{ stage, profile, decider string }{
		{"prefill", h.params.Profiles.Prefill, h.params.Deciders.Prefill},
		{"encode", h.params.Profiles.Encode, h.params.Deciders.Encode},
	} {
		if st.decider != "" && !slices.Contains(configured, st.profile) {
			h.log.Info("stage has a decider but no scheduling profile; the stage never runs",
				"plugin", h.typedName.String(), "stage", st.stage, "profile", st.profile, "decider", st.decider)
		}
	}
}

// CheckProfiles implements contract.ProfileChecker.
func (h *PDHandler) CheckProfiles(configured []string) error {
	decode, err := resolveDecodeProfile(h.typedName.String(), h.params.DecodeProfile, configured)
	if err != nil {
		return err
	}
	if decode != h.params.DecodeProfile {
		h.log.Info("decode profile not configured; the only scheduling profile serves as decode",
			"plugin", h.typedName.String(), "want", h.params.DecodeProfile, "using", decode)
		h.params.DecodeProfile = decode
	}
	return nil
}
