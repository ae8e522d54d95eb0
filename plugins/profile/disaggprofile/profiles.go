package disaggprofile

import (
	"fmt"
	"slices"
	"strconv"
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

// stageRef is one optional stage (prefill, encode) of a handler as its parameters describe it.
type stageRef struct {
	stage, profile, def, param, decider string
}

// checkStages applies the rules both handlers share once decode is resolved, so that a stage
// cannot be switched off by a spelling mistake with one log line as the only sign:
//   - a stage profile the parameters name (anything but the default name) must be configured;
//   - every configured profile must be one of the handler's stages: any other one never runs,
//     and is most often the stage profile misspelled in schedulingProfiles;
//   - a stage with a decider needs its profile, unless the configuration has a single profile
//     (llm-d's decider-without-profiles examples, where GIE builds "default": decode-only).
func checkStages(plugin, decode string, stages []stageRef, configured []string) error {
	sorted := slices.Clone(configured)
	slices.Sort(sorted)
	list := strings.Join(sorted, ", ")
	for _, st := range stages {
		if st.profile != "" && st.profile != st.def && !slices.Contains(configured, st.profile) {
			return fmt.Errorf("plugin %s: %s profile %q (parameter %s) is not configured (scheduling profiles: %s); "+
				"the %s stage would never run: add a profile %q or fix %s", plugin, st.stage, st.profile, st.param, list, st.stage, st.profile, st.param)
		}
	}
	claimed := []string{decode}
	names := []string{"decode " + strconv.Quote(decode)}
	for _, st := range stages {
		if st.profile != "" {
			claimed = append(claimed, st.profile)
			names = append(names, st.stage+" "+strconv.Quote(st.profile))
		}
	}
	for _, c := range sorted {
		if !slices.Contains(claimed, c) {
			return fmt.Errorf("plugin %s: scheduling profile %q is none of its stages (%s) and would never run; "+
				"rename the profile or set the stage's profile parameter", plugin, c, strings.Join(names, ", "))
		}
	}
	if len(configured) < 2 {
		return nil
	}
	for _, st := range stages {
		if st.decider != "" && st.profile != "" && !slices.Contains(configured, st.profile) {
			return fmt.Errorf("plugin %s: the %s decider %q is configured but the %s profile %q is not (scheduling profiles: %s); "+
				"the %s stage would never run: add a profile %q or remove the decider", plugin, st.stage, st.decider, st.stage, st.profile, list, st.stage, st.profile)
		}
	}
	return nil
}

// CheckProfiles implements contract.ProfileChecker.
func (h *Handler) CheckProfiles(configured []string) error {
	decode, err := resolveDecodeProfile(h.typedName.String(), h.params.Profiles.Decode, configured)
	if err != nil {
		return err
	}
	pf, dc := h.params.Profiles, h.params.Deciders
	if err := checkStages(h.typedName.String(), decode, []stageRef{
		{stage: "prefill", profile: pf.Prefill, def: "prefill", param: "profiles.prefill", decider: dc.Prefill},
		{stage: "encode", profile: pf.Encode, def: "encode", param: "profiles.encode", decider: dc.Encode},
	}, configured); err != nil {
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

// noteMissingStages logs, once at start, a decider whose stage has no profile in a
// single-profile configuration (checkStages refuses it otherwise): the stage then never runs
// (decode-only), which is what llm-d's decider-without-profiles example does.
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
	if err := checkStages(h.typedName.String(), decode, []stageRef{
		{stage: "prefill", profile: h.params.PrefillProfile, def: "prefill", param: "prefillProfile", decider: h.params.DeciderPluginName},
	}, configured); err != nil {
		return err
	}
	if decode != h.params.DecodeProfile {
		h.log.Info("decode profile not configured; the only scheduling profile serves as decode",
			"plugin", h.typedName.String(), "want", h.params.DecodeProfile, "using", decode)
		h.params.DecodeProfile = decode
	}
	return nil
}
