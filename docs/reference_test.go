package docs

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pdgate/pdgate/cmd/pdgate/cli"
	"github.com/pdgate/pdgate/plugins"
)

const modulePath = "github.com/pdgate/pdgate/"

var (
	typeHeading = regexp.MustCompile("(?m)^## `([a-z0-9-]+)`")
	paramRow    = regexp.MustCompile("(?m)^\\| `([A-Za-z0-9_.]+)` \\|")
	yamlBlock   = regexp.MustCompile("(?ms)^```yaml\\n(.*?)^```")
	embedMarker = regexp.MustCompile("(?m)^<!-- embed: ([^ ]+) -->\\n```yaml\\n")
	metricName  = regexp.MustCompile(`"(pdgate_[a-z0-9_]+)"`)
	eppKind     = regexp.MustCompile(`(?m)^kind: EndpointPickerConfig\s*$`)
)

func readDoc(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return string(data)
}

// typePackages maps every registered pdgate type name to the directory of the package that
// defines it, read from the registrations literal in plugins/register.go. TypeNames() lists
// the types in the same order as that literal.
func typePackages(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../plugins/register.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	imports := map[string]string{}
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		imports[filepath.Base(p)] = p
	}
	var pkgs []string
	ast.Inspect(f, func(n ast.Node) bool {
		kv, ok := n.(*ast.KeyValueExpr)
		if !ok {
			return true
		}
		if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "typeName" {
			sel, ok := kv.Value.(*ast.SelectorExpr)
			if !ok {
				t.Fatalf("register.go: typeName is not pkg.Const: %T", kv.Value)
			}
			pkgs = append(pkgs, imports[sel.X.(*ast.Ident).Name])
		}
		return true
	})
	names := plugins.TypeNames()
	if len(pkgs) != len(names) || len(names) == 0 {
		t.Fatalf("register.go has %d registrations, TypeNames() %d", len(pkgs), len(names))
	}
	out := map[string]string{}
	for i, n := range names {
		out[n] = filepath.Join("..", strings.TrimPrefix(pkgs[i], modulePath))
	}
	return out
}

// jsonTags returns the json field names declared in the non-test Go files of dir and of the
// pdgate plugin packages it imports (shared parameter structs such as pdknobs).
func jsonTags(t *testing.T, dir string, seen map[string]bool) map[string]bool {
	t.Helper()
	tags := map[string]bool{}
	if seen[dir] {
		return tags
	}
	seen[dir] = true
	files, err := parseGoFiles(dir, 0)
	if err != nil {
		t.Fatalf("parse %s: %v", dir, err)
	}
	var deps []string
	usesLabelSelector := false
	for _, f := range files {
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(p, modulePath+"plugins/") {
				deps = append(deps, filepath.Join("..", strings.TrimPrefix(p, modulePath)))
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "LabelSelector" {
				usesLabelSelector = true
			}
			field, ok := n.(*ast.Field)
			if !ok || field.Tag == nil {
				return true
			}
			raw, _ := strconv.Unquote(field.Tag.Value)
			name, _, _ := strings.Cut(reflect.StructTag(raw).Get("json"), ",")
			if name != "" && name != "-" {
				tags[name] = true
			}
			return true
		})
	}
	// A package that decodes its parameters straight into a Kubernetes LabelSelector accepts
	// that type's fields.
	if usesLabelSelector {
		st := reflect.TypeOf(metav1.LabelSelector{})
		for i := 0; i < st.NumField(); i++ {
			name, _, _ := strings.Cut(st.Field(i).Tag.Get("json"), ",")
			tags[name] = true
		}
	}
	for _, d := range deps {
		for k := range jsonTags(t, d, seen) {
			tags[k] = true
		}
	}
	return tags
}

// referenceSections splits plugins.md into "## `type`" sections and returns the parameter
// names of each section's tables.
func referenceSections(text string) map[string][]string {
	out := map[string][]string{}
	locs := typeHeading.FindAllStringSubmatchIndex(text, -1)
	for i, loc := range locs {
		end := len(text)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		name := text[loc[2]:loc[3]]
		params := []string{}
		for _, m := range paramRow.FindAllStringSubmatch(text[loc[1]:end], -1) {
			params = append(params, m[1])
		}
		out[name] = params
	}
	return out
}

// unknownParams returns the parameters (dotted paths allowed) with a segment that is not a
// json tag of the plugin's package.
func unknownParams(params []string, tags map[string]bool) []string {
	var bad []string
	for _, p := range params {
		for _, seg := range strings.Split(p, ".") {
			if !tags[seg] {
				bad = append(bad, p)
				break
			}
		}
	}
	return bad
}

func TestPluginReferenceCoversEveryRegisteredType(t *testing.T) {
	sections := referenceSections(readDoc(t, "plugins.md"))
	pkgs := typePackages(t)
	checked := 0
	doc := readDoc(t, "plugins.md")
	for _, typ := range plugins.TypeNames() {
		// The type table at the top is where readers look first.
		if !strings.Contains(doc, fmt.Sprintf("| [`%s`](#%s) |", typ, typ)) {
			t.Errorf("docs/plugins.md: the type table has no row for %s", typ)
		}
		params, ok := sections[typ]
		if !ok {
			t.Errorf("docs/plugins.md has no \"## `%s`\" section", typ)
			continue
		}
		tags := jsonTags(t, pkgs[typ], map[string]bool{})
		if bad := unknownParams(params, tags); len(bad) > 0 {
			t.Errorf("docs/plugins.md: %s documents parameters the plugin (%s) does not accept: %v", typ, pkgs[typ], bad)
		}
		if missing := notInReadmes(t, pkgs[typ], params); len(missing) > 0 {
			t.Errorf("docs/plugins.md: %s parameters not described in the package README (or its shared knobs' README): %v", typ, missing)
		}
		checked += len(params)
	}
	for name := range sections {
		if _, ok := pkgs[name]; !ok {
			t.Errorf("docs/plugins.md documents %q, which is not a registered pdgate type", name)
		}
	}
	if checked < 40 {
		t.Errorf("only %d parameters checked; the parameter tables were not found", checked)
	}
}

// notInReadmes returns the parameters whose name (full or last segment, in backticks) the
// README of the plugin's package, and of the pdgate plugin packages it imports, never mention.
func notInReadmes(t *testing.T, dir string, params []string) []string {
	t.Helper()
	var text strings.Builder
	dirs := []string{dir}
	files, err := parseGoFiles(dir, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(p, modulePath+"plugins/") {
				dirs = append(dirs, filepath.Join("..", strings.TrimPrefix(p, modulePath)))
			}
		}
	}
	for _, d := range dirs {
		if data, err := os.ReadFile(filepath.Join(d, "README.md")); err == nil {
			text.Write(data)
		}
	}
	var missing []string
	for _, p := range params {
		segs := strings.Split(p, ".")
		last := segs[len(segs)-1]
		if !strings.Contains(text.String(), "`"+p+"`") && !strings.Contains(text.String(), "`"+last) && !strings.Contains(text.String(), "."+last) {
			missing = append(missing, p)
		}
	}
	return missing
}

func TestUnknownParamsDetectsStrangers(t *testing.T) {
	tags := jsonTags(t, "../plugins/requestcontrol/pdtokenledger", map[string]bool{})
	tests := []struct {
		params []string
		want   int
	}{
		{params: []string{"requestCost", "redis.address"}, want: 0},
		{params: []string{"requestCosts"}, want: 1},
		{params: []string{"redis.adress", "kvWeight"}, want: 1},
	}
	for _, tt := range tests {
		if got := unknownParams(tt.params, tags); len(got) != tt.want {
			t.Errorf("unknownParams(%v) = %v, want %d unknown", tt.params, got, tt.want)
		}
	}
}

// TestEmbeddedConfigsMatchShippedFiles keeps every block marked "<!-- embed: path -->" equal
// to the file under the repository root it copies.
func TestEmbeddedConfigsMatchShippedFiles(t *testing.T) {
	files, _ := filepath.Glob("*.md")
	n := 0
	for _, file := range files {
		text := readDoc(t, file)
		for _, loc := range embedMarker.FindAllStringSubmatchIndex(text, -1) {
			path := text[loc[2]:loc[3]]
			rest := text[loc[1]:]
			end := strings.Index(rest, "\n```")
			if end < 0 {
				t.Fatalf("%s: unterminated block for %s", file, path)
			}
			want := readDoc(t, filepath.Join("..", path))
			if got := rest[:end+1]; got != want {
				t.Errorf("%s: embedded %s differs from the shipped file; copy it again", file, path)
			}
			n++
		}
	}
	if n < 6 {
		t.Errorf("found %d embedded configs, want at least 6", n)
	}
}

// TestDocConfigsLoad loads every EndpointPickerConfig shown in docs/ the way `pdgate validate`
// and the EPP do, with every plugin registered.
func TestDocConfigsLoad(t *testing.T) {
	files, _ := filepath.Glob("*.md")
	n := 0
	for _, file := range files {
		for i, m := range yamlBlock.FindAllStringSubmatch(readDoc(t, file), -1) {
			if !eppKind.MatchString(m[1]) {
				continue
			}
			n++
			if _, err := cli.Validate(context.Background(), []byte(m[1])); err != nil {
				t.Errorf("%s: yaml block %d does not load: %v", file, i+1, err)
			}
		}
	}
	if n < 6 {
		t.Errorf("found %d EndpointPickerConfig samples in docs/, want at least 6", n)
	}
}

// TestEveryMetricDocumented: every pdgate_ metric name in the Go sources of cmd/ and plugins/
// appears in docs/operations.md.
func TestEveryMetricDocumented(t *testing.T) {
	ops := readDoc(t, "operations.md")
	names := codeMetricNames(t)
	var missing []string
	for n := range names {
		if !strings.Contains(ops, "`"+n+"`") {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("docs/operations.md does not document: %s", strings.Join(missing, ", "))
	}
}

// TestDocumentedMetricsExist is the other direction: every pdgate_ name in the Markdown (the
// operations page, its PromQL alerts, the plugin READMEs) and in the Grafana dashboard is a
// metric the code registers (histograms with their _bucket/_sum/_count series; a name ending
// in "_", like pdgate_sidecar_*, is a prefix some metric must have). A renamed metric leaves
// no dead alert or panel behind.
func TestDocumentedMetricsExist(t *testing.T) {
	names := codeMetricNames(t)
	mentioned := regexp.MustCompile(`pdgate_[a-z0-9_]+`)
	checked := 0
	err := filepath.WalkDir("..", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "node_modules", "testdata", "bench-results":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".md") && !(strings.HasSuffix(p, ".json") && strings.Contains(p, "dashboards")) {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range mentioned.FindAllString(string(data), -1) {
			checked++
			if !metricExists(names, m) {
				t.Errorf("%s mentions %s, which no code registers", p, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Errorf("only %d metric mentions checked; the walk missed the docs", checked)
	}
}

func metricExists(names map[string]bool, m string) bool {
	if strings.HasSuffix(m, "_") {
		for n := range names {
			if strings.HasPrefix(n, m) {
				return true
			}
		}
		return false
	}
	if names[m] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(m, suffix); ok && names[base] {
			return true
		}
	}
	return false
}

// codeMetricNames returns the pdgate_ metric names written in the non-test Go sources of cmd/
// and plugins/.
func codeMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, root := range []string{"../cmd", "../plugins"} {
		err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range metricName.FindAllStringSubmatch(string(data), -1) {
				names[m[1]] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(names) < 30 {
		t.Fatalf("found only %d pdgate_ metric names in the sources", len(names))
	}
	return names
}

// parseGoFiles parses the non-test Go files of one directory.
func parseGoFiles(dir string, mode parser.Mode) ([]*ast.File, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, mode)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}
