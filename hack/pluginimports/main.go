// Command pluginimports enforces the import arrows between pdgate's rooms (make lint runs it;
// docs/architecture.md draws them):
//
//   - no plugin package imports another plugin package, and no library imports a plugin.
//     Plugin packages are the folders under plugins/<extension point>/ and plugins/<family>/;
//     libraries are plugins/framework/... (the plugin SDK), plugins/lib/..., any internal/
//     package (plugins/internal/... and a family's own, such as plugins/aibrix/internal/...),
//     the family libraries listed below, and plugins/wire/...; plugins itself is the registry,
//     the one package that imports every plugin. Shared formulas, keys and types belong in a library, so a plugin depends on
//     what it uses and not on another plugin's factory, parameters and state. Test files may
//     still build a second plugin to test a composition (a producer with the scorer that
//     reads it); they are not part of the package a binary links.
//   - nothing under plugins/ imports a binary (cmd/...) or a test suite (test/...): dependencies
//     point from the binaries to the libraries. Test files may use test/testsupport.
//   - plugins/wire (what crosses process boundaries: routing headers, the KV-event codec,
//     token packing) imports nothing of pdgate outside plugins/wire and nothing of GIE
//     (sigs.k8s.io/gateway-api-inference-extension), its tests included, and links no GIE
//     package: every binary may import it.
//   - the binaries that are not the EPP (cmd/sidecar, cmd/gateway, cmd/sim) import nothing
//     under plugins/ but plugins/wire, and link no GIE package: the sidecar talks to the EPP
//     only through headers, the simulator is an engine, the dev gateway only speaks ext_proc.
//     Their test files may drive the EPP's own libraries (the simulator's tests subscribe to
//     it with the EPP's KV-event index); they are not part of the binary.
//   - the other binaries (the EPP, the CLI and its simulation) import no plugin package but
//     through the registry: they reach plugins through plugins/framework's interfaces
//     (contract.StageClassifier, contract.Clocked, ...), so no type switch or cast names a
//     concrete plugin outside its package. cmd/epp/pluginset, which adds the producers a
//     configuration consumes but does not declare, is the one exception. Tests may.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
)

const (
	module = "github.com/pdgate/pdgate"
	root   = module + "/plugins"
	wire   = root + "/wire"
	gie    = "sigs.k8s.io/gateway-api-inference-extension"
)

// wireOnly are the binaries that may import nothing under plugins/ but plugins/wire.
var wireOnly = []string{module + "/cmd/sidecar", module + "/cmd/gateway", module + "/cmd/sim"}

// familyLibraries are a plugin family's code that is not a plugin and that something outside
// the family imports, so it cannot sit in the family's internal/ (a family's private code does;
// the compiler keeps everyone else out): the precise family's KV-event index, which the
// simulator's tests subscribe with.
var familyLibraries = []string{root + "/precise/kvevents"}

// pluginAware are the packages of the other binaries that may import plugin packages.
var pluginAware = []string{module + "/cmd/epp/pluginset"}

// patterns are the packages go list reports to the check.
func patterns() []string {
	return []string{root + "/...", module + "/cmd/..."}
}

type pkg struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
	Deps         []string // every package the non-test package links
}

// under reports whether path is dir or a package below it.
func under(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// kind classifies an import path: "registry", "wire", "library", "plugin", "binary" (one of
// wireOnly) or "" (anything else).
func kind(path string) string {
	switch {
	case path == root:
		return "registry"
	case under(path, wire):
		return "wire"
	case strings.HasPrefix(path, root+"/framework/"), strings.HasPrefix(path, root+"/lib/"),
		strings.HasPrefix(path, root+"/internal/"), strings.Contains(path, "/internal/"),
		slices.Contains(familyLibraries, path):
		return "library"
	case strings.HasPrefix(path, root+"/"):
		return "plugin"
	}
	for _, b := range wireOnly {
		if under(path, b) {
			return "binary"
		}
	}
	if under(path, module+"/cmd") {
		return "epp-side"
	}
	return ""
}

func short(path string) string {
	return strings.TrimPrefix(path, module+"/")
}

// check returns one line per forbidden arrow among pkgs, sorted and without repeats.
func check(pkgs []pkg) []string {
	var bad []string
	for _, p := range pkgs {
		from := kind(p.ImportPath)
		if from == "registry" || from == "library" || from == "plugin" {
			for _, imp := range p.Imports {
				if under(imp, module+"/cmd") || under(imp, module+"/test") {
					bad = append(bad, fmt.Sprintf("%s %s imports %s (the plugins know no binary and no test suite)", from, short(p.ImportPath), short(imp)))
				}
			}
		}
		switch from {
		case "registry", "":
			continue
		case "binary":
			for _, imp := range p.Imports {
				if under(imp, root) && kind(imp) != "wire" {
					bad = append(bad, fmt.Sprintf("binary %s imports %s (only plugins/wire may cross into a binary that is not the EPP)", short(p.ImportPath), short(imp)))
				}
			}
			bad = append(bad, linksGIE(p)...)
			continue
		case "epp-side":
			if slices.Contains(pluginAware, p.ImportPath) {
				continue
			}
			for _, imp := range p.Imports {
				if kind(imp) == "plugin" {
					bad = append(bad, fmt.Sprintf("binary %s imports plugin %s (reach it through a plugins/framework interface)", short(p.ImportPath), short(imp)))
				}
			}
			continue
		case "wire":
			for _, imp := range all(p) {
				if (under(imp, module) && kind(imp) != "wire") || under(imp, gie) {
					bad = append(bad, fmt.Sprintf("wire %s imports %s (plugins/wire imports nothing of ours outside plugins/wire and no GIE)", short(p.ImportPath), short(imp)))
				}
			}
			bad = append(bad, linksGIE(p)...)
			continue
		}
		for _, imp := range p.Imports {
			if kind(imp) != "plugin" {
				continue
			}
			bad = append(bad, fmt.Sprintf("%s %s imports plugin %s (move what they share into plugins/lib)", from, short(p.ImportPath), short(imp)))
		}
	}
	sort.Strings(bad)
	return dedupe(bad)
}

// all is every import of p, its tests' included.
func all(p pkg) []string {
	out := append([]string{}, p.Imports...)
	out = append(out, p.TestImports...)
	return append(out, p.XTestImports...)
}

// linksGIE reports the first GIE package p links, if any (one line: the import that pulls it
// in is what to fix).
func linksGIE(p pkg) []string {
	for _, d := range p.Deps {
		if under(d, gie) {
			return []string{fmt.Sprintf("%s %s links %s", kind(p.ImportPath), short(p.ImportPath), d)}
		}
	}
	return nil
}

func main() {
	args := append([]string{"list", "-json=ImportPath,Imports,TestImports,XTestImports,Deps"}, patterns()...)
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pluginimports: go list:", err)
		os.Exit(2)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var pkgs []pkg
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			fmt.Fprintln(os.Stderr, "pluginimports: decoding go list output:", err)
			os.Exit(2)
		}
		pkgs = append(pkgs, p)
	}
	if bad := check(pkgs); len(bad) > 0 {
		fmt.Fprintln(os.Stderr, "forbidden imports (docs/architecture.md):")
		for _, b := range bad {
			fmt.Fprintln(os.Stderr, "  "+b)
		}
		os.Exit(1)
	}
}

func dedupe(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}
