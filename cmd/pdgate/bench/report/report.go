// Package report writes a benchmark's results three ways: <name>.json (the raw data and the
// run's context, for tools and for diffing runs), <name>.md (tables a person reads) and PNG
// plots referenced from the Markdown. Every `pdgate bench` subcommand builds one Report so
// that their outputs look alike and docs/benchmarks.md can paste them.
package report

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Report is one benchmark run.
type Report struct {
	// Name is the file stem: <dir>/<Name>.json and <dir>/<Name>.md.
	Name  string `json:"name"`
	Title string `json:"title"`
	// Command is the command line that reproduces the run.
	Command  string    `json:"command"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Machine  Machine   `json:"machine"`
	Sections []Section `json:"sections"`
	// Data is the bench's raw results, written as-is into the JSON file.
	Data any `json:"data,omitempty"`
}

// Machine says where the figures were taken; benchmark numbers mean little without it.
type Machine struct {
	Hostname    string `json:"hostname"`
	CPUs        int    `json:"cpus"`
	GOOS        string `json:"goos"`
	GOARCH      string `json:"goarch"`
	GoVersion   string `json:"goVersion"`
	LoadAverage string `json:"loadAverage,omitempty"`
}

// Section is one titled part of the Markdown report.
type Section struct {
	Title  string  `json:"title"`
	Text   string  `json:"text,omitempty"` // Markdown, written before the tables
	Tables []Table `json:"tables,omitempty"`
	Plots  []Plot  `json:"plots,omitempty"`
}

// Table is a Markdown table; every row has len(Columns) cells.
type Table struct {
	Title   string     `json:"title,omitempty"`
	Columns []string   `json:"columns"`
	Rows    [][]string `json:"rows"`
}

// New starts a report named name (the file stem) with the machine and command filled in.
func New(name, title string) *Report {
	return &Report{
		Name:    name,
		Title:   title,
		Command: strings.Join(append([]string{filepath.Base(os.Args[0])}, os.Args[1:]...), " "),
		Started: time.Now().UTC(),
		Machine: currentMachine(),
	}
}

// Add appends a section.
func (r *Report) Add(s Section) { r.Sections = append(r.Sections, s) }

func currentMachine() Machine {
	host, _ := os.Hostname()
	m := Machine{Hostname: host, CPUs: runtime.NumCPU(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.LoadAverage = strings.Join(f[:3], " ")
		}
	}
	return m
}

// Write renders the plots and writes <dir>/<Name>.json and <dir>/<Name>.md. It returns the
// Markdown file's path. Nothing is written when a table or plot is malformed.
func (r *Report) Write(dir string) (string, error) {
	if r.Name == "" || strings.ContainsAny(r.Name, `/\`) {
		return "", fmt.Errorf("report: invalid name %q", r.Name)
	}
	if err := r.validate(); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("report: %w", err)
	}
	if r.Finished.IsZero() {
		r.Finished = time.Now().UTC()
	}
	for _, s := range r.Sections {
		for _, p := range s.Plots {
			if err := p.render(filepath.Join(dir, p.File)); err != nil {
				return "", fmt.Errorf("report %s: plot %s: %w", r.Name, p.File, err)
			}
		}
	}
	js, err := MarshalIndent(r)
	if err != nil {
		return "", fmt.Errorf("report %s: encoding JSON: %w", r.Name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, r.Name+".json"), append(js, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("report %s: %w", r.Name, err)
	}
	md := filepath.Join(dir, r.Name+".md")
	if err := os.WriteFile(md, []byte(r.Markdown()), 0o644); err != nil {
		return "", fmt.Errorf("report %s: %w", r.Name, err)
	}
	return md, nil
}

func (r *Report) validate() error {
	files := map[string]bool{}
	for _, s := range r.Sections {
		for _, t := range s.Tables {
			for i, row := range t.Rows {
				if len(row) != len(t.Columns) {
					return fmt.Errorf("report %s: section %q table %q row %d has %d cells, want %d",
						r.Name, s.Title, t.Title, i, len(row), len(t.Columns))
				}
			}
		}
		for _, p := range s.Plots {
			if err := p.validate(); err != nil {
				return fmt.Errorf("report %s: section %q: %w", r.Name, s.Title, err)
			}
			if files[p.File] {
				return fmt.Errorf("report %s: plot file %q used twice", r.Name, p.File)
			}
			files[p.File] = true
		}
	}
	return nil
}

// Markdown renders the report; plots are linked by file name (relative to the report).
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", r.Title)
	fmt.Fprintf(&b, "```sh\n%s\n```\n\n", r.Command)
	m := r.Machine
	fmt.Fprintf(&b, "Run %s → %s on %s: %d CPUs, %s/%s, %s", r.Started.Format(time.RFC3339),
		r.Finished.Format(time.RFC3339), m.Hostname, m.CPUs, m.GOOS, m.GOARCH, m.GoVersion)
	if m.LoadAverage != "" {
		fmt.Fprintf(&b, ", load average %s", m.LoadAverage)
	}
	b.WriteString(".\n")
	for _, s := range r.Sections {
		fmt.Fprintf(&b, "\n## %s\n\n", s.Title)
		if s.Text != "" {
			b.WriteString(strings.TrimRight(s.Text, "\n") + "\n\n")
		}
		for _, t := range s.Tables {
			writeTable(&b, t)
		}
		for _, p := range s.Plots {
			fmt.Fprintf(&b, "![%s](%s)\n\n", p.Title, p.File)
		}
	}
	return b.String()
}

func writeTable(b *strings.Builder, t Table) {
	if t.Title != "" {
		fmt.Fprintf(b, "**%s**\n\n", t.Title)
	}
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	b.WriteString("|")
	for _, c := range t.Columns {
		b.WriteString(" " + cell(c) + " |")
	}
	b.WriteString("\n|")
	for range t.Columns {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, row := range t.Rows {
		b.WriteString("|")
		for _, c := range row {
			b.WriteString(" " + cell(c) + " |")
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

// MarshalIndent is json.MarshalIndent that writes NaN and infinities as null instead of
// failing: every benchmark result file goes through it.
func MarshalIndent(v any) ([]byte, error) {
	encodable, err := finiteJSON(v)
	if err != nil {
		return nil, err
	}
	return json.MarshalIndent(encodable, "", "  ")
}
