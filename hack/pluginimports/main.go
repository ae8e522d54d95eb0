// Command pluginimports enforces the plugins/ layout (make lint runs it): no plugin package
// imports another plugin package, and no library imports a plugin. Plugin packages are the
// folders under plugins/<extension point>/; libraries are plugins/lib/... and
// plugins/internal/...; plugins itself is the registry, the one package that imports every
// plugin. Shared formulas, keys and types belong in a library, so a plugin depends on what it
// uses and not on another plugin's factory, parameters and state. Test files may still build a
// second plugin to test a composition (a producer with the scorer that reads it); they are not
// part of the package a binary links.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
)

const root = "github.com/pdgate/pdgate/plugins"

type pkg struct {
	ImportPath string
	Imports    []string
}

// kind classifies an import path: "registry", "library", "plugin" or "" (outside plugins/).
func kind(path string) string {
	switch {
	case path == root:
		return "registry"
	case strings.HasPrefix(path, root+"/lib/"), strings.HasPrefix(path, root+"/internal/"):
		return "library"
	case strings.HasPrefix(path, root+"/"):
		return "plugin"
	}
	return ""
}

func main() {
	out, err := exec.Command("go", "list", "-json", root+"/...").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pluginimports: go list:", err)
		os.Exit(2)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var bad []string
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			fmt.Fprintln(os.Stderr, "pluginimports: decoding go list output:", err)
			os.Exit(2)
		}
		from := kind(p.ImportPath)
		if from == "registry" {
			continue
		}
		for _, imp := range p.Imports {
			if kind(imp) != "plugin" {
				continue
			}
			bad = append(bad, fmt.Sprintf("%s %s imports plugin %s", from, strings.TrimPrefix(p.ImportPath, root+"/"), strings.TrimPrefix(imp, root+"/")))
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		bad = dedupe(bad)
		fmt.Fprintln(os.Stderr, "plugins/ layout: a plugin or library imports a plugin; move what they share into plugins/lib:")
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
