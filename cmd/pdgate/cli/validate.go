package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	configapi "sigs.k8s.io/gateway-api-inference-extension/apix/config/v1alpha1"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkflowcontrol "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/flowcontrol"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwkrh "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requesthandling"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/cmd/epp/core"
)

func init() { Register(newValidateCommand) }

func newValidateCommand() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "validate --config FILE",
		Short: "Load an EndpointPickerConfig with every plugin registered and print what it builds",
		Long: `validate loads an EndpointPickerConfig exactly as the EPP does (GIE's in-tree plugins and
pdgate's registered; apiVersion inference.networking.x-k8s.io/v1alpha1 or llm-d.ai/v1alpha1),
instantiates every plugin, applies GIE's defaults, checks the data dependencies and that every
profile a handler names exists, and prints the plugin instances and scheduling profiles. It runs
the EPP's own constructor (cmd/epp/core), so a config it accepts is one the EPP starts with. It
exits 1 with the failing plugin and field on error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return fmt.Errorf("--config is required")
			}
			data, err := os.ReadFile(file)
			if err != nil {
				return fmt.Errorf("reading config: %w", err)
			}
			rep, err := Validate(cmd.Context(), data)
			if err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: OK\n", file)
			rep.Print(cmd.OutOrStdout())
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "config", "c", "", "EndpointPickerConfig YAML file")
	return cmd
}

// Report describes a loaded config.
type Report struct {
	Plugins        []PluginInfo
	Profiles       []configapi.SchedulingProfile
	ProfileHandler string
	Parser         string
	Saturation     string
	DataSources    []string
	FeatureGates   []string
}

// PluginInfo is one plugin instance and the roles it plays.
type PluginInfo struct {
	Name, Type string
	Roles      []string
}

// Validate loads config bytes through the EPP's constructor without serving anything.
func Validate(ctx context.Context, data []byte) (*Report, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // plugin factories may start goroutines bound to the handle's context
	c, err := core.New(ctx, core.Options{Config: data, Validate: true})
	if err != nil {
		return nil, err
	}
	raw, gates, handle, cfg := c.Raw, c.Gates, c.Handle, c.Loaded
	rep := &Report{Profiles: raw.SchedulingProfiles, Saturation: raw.SaturationDetector.PluginRef}
	if raw.Parser != nil {
		rep.Parser = raw.Parser.PluginRef
	}
	for name, on := range gates {
		if on {
			rep.FeatureGates = append(rep.FeatureGates, name)
		}
	}
	sort.Strings(rep.FeatureGates)
	for name, p := range handle.GetAllPluginsWithNames() {
		info := PluginInfo{Name: name, Type: p.TypedName().Type, Roles: roles(p)}
		if _, ok := p.(fwksched.ProfileHandler); ok {
			rep.ProfileHandler = name
		}
		rep.Plugins = append(rep.Plugins, info)
	}
	sort.Slice(rep.Plugins, func(i, j int) bool { return rep.Plugins[i].Name < rep.Plugins[j].Name })
	if cfg.DataConfig != nil {
		for _, s := range cfg.DataConfig.Sources {
			var ex []string
			for _, e := range s.Extractors {
				ex = append(ex, e.TypedName().Name)
			}
			rep.DataSources = append(rep.DataSources, s.Plugin.TypedName().Name+" -> "+strings.Join(ex, ", "))
		}
	}
	return rep, nil
}

// pluginRoles are the extension points a plugin can implement, in the report's order.
var pluginRoles = []struct {
	name string
	is   func(fwkplugin.Plugin) bool
}{
	// scheduling
	{"profile-handler", implements[fwksched.ProfileHandler]}, {"filter", implements[fwksched.Filter]},
	{"scorer", implements[fwksched.Scorer]}, {"picker", implements[fwksched.Picker]},
	// request control
	{"prepare-data", implements[fwkrc.PrepareDataPlugin]}, {"admission", implements[fwkrc.AdmissionPlugin]},
	{"pre-request", implements[fwkrc.PreRequest]},
	{"response-header", implements[fwkrc.ResponseHeader]}, {"response-body", implements[fwkrc.ResponseBody]},
	// request handling, data layer, flow control
	{"parser", implements[fwkrh.Parser]},
	{"data-source", implements[fwkdl.DataSource]}, {"extractor", implements[fwkdl.Extractor]},
	{"saturation-detector", implements[fwkflowcontrol.SaturationDetector]},
}

func implements[T any](p fwkplugin.Plugin) bool {
	_, ok := p.(T)
	return ok
}

func roles(p fwkplugin.Plugin) []string {
	var r []string
	for _, role := range pluginRoles {
		if role.is(p) {
			r = append(r, role.name)
		}
	}
	return r
}

// Print writes the report in a stable, human-readable form.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "plugins (%d):\n", len(r.Plugins))
	for _, p := range r.Plugins {
		roles := strings.Join(p.Roles, ",")
		if roles == "" {
			roles = "-"
		}
		fmt.Fprintf(w, "  %-36s type=%-36s roles=%s\n", p.Name, p.Type, roles)
	}
	fmt.Fprintf(w, "profile handler: %s\n", r.ProfileHandler)
	fmt.Fprintf(w, "scheduling profiles (%d):\n", len(r.Profiles))
	for _, prof := range r.Profiles {
		var parts []string
		for _, ref := range prof.Plugins {
			if ref.Weight != nil {
				parts = append(parts, fmt.Sprintf("%s (weight %g)", ref.PluginRef, *ref.Weight))
			} else {
				parts = append(parts, ref.PluginRef)
			}
		}
		fmt.Fprintf(w, "  %s: %s\n", prof.Name, strings.Join(parts, ", "))
	}
	fmt.Fprintf(w, "parser: %s\n", r.Parser)
	fmt.Fprintf(w, "saturation detector: %s\n", r.Saturation)
	if len(r.DataSources) > 0 {
		fmt.Fprintf(w, "data sources:\n")
		for _, d := range r.DataSources {
			fmt.Fprintf(w, "  %s\n", d)
		}
	}
	if len(r.FeatureGates) > 0 {
		fmt.Fprintf(w, "feature gates: %s\n", strings.Join(r.FeatureGates, ", "))
	}
}
