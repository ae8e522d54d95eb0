package workload

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/pdgate/pdgate/cmd/internal/listgen"
)

// DefaultAzureConvPath is the trace's place relative to the repository root.
const DefaultAzureConvPath = "../shared/data/azure-llm-inference-2023/conv.csv"

// AzureRow is one invocation of the Azure LLM inference trace.
type AzureRow struct {
	Offset          time.Duration // since the first row
	ContextTokens   int
	GeneratedTokens int
}

const azureTimeLayout = "2006-01-02 15:04:05.0000000"

// ParseAzureTrace reads the conv.csv format: header TIMESTAMP,ContextTokens,GeneratedTokens,
// CRLF line ends, strictly increasing timestamps (7 fractional digits).
func ParseAzureTrace(r io.Reader) ([]AzureRow, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 3
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("azure trace: header: %w", err)
	}
	if strings.TrimSpace(head[0]) != "TIMESTAMP" || strings.TrimSpace(head[1]) != "ContextTokens" || strings.TrimSpace(head[2]) != "GeneratedTokens" {
		return nil, fmt.Errorf("azure trace: header %q, want TIMESTAMP,ContextTokens,GeneratedTokens", head)
	}
	var rows []AzureRow
	var first time.Time
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("azure trace: line %d: %w", line, err)
		}
		ts, err := time.Parse(azureTimeLayout, strings.TrimSpace(rec[0]))
		if err != nil {
			return nil, fmt.Errorf("azure trace: line %d: TIMESTAMP: %w", line, err)
		}
		ctx, err1 := strconv.Atoi(strings.TrimSpace(rec[1]))
		gen, err2 := strconv.Atoi(strings.TrimSpace(rec[2]))
		if err1 != nil || err2 != nil || ctx < 1 || gen < 1 {
			return nil, fmt.Errorf("azure trace: line %d: token counts must be positive integers, got %q, %q", line, rec[1], rec[2])
		}
		if len(rows) == 0 {
			first = ts
		}
		off := ts.Sub(first)
		if len(rows) > 0 && off < rows[len(rows)-1].Offset {
			return nil, fmt.Errorf("azure trace: line %d: timestamp goes backwards", line)
		}
		rows = append(rows, AzureRow{Offset: off, ContextTokens: ctx, GeneratedTokens: gen})
	}
	if len(rows) == 0 {
		return nil, errors.New("azure trace: no rows")
	}
	return rows, nil
}

type azureReplay struct {
	o    Options
	rows []AzureRow
	rng  *rand.Rand
	i    int
}

// LoadAzureTrace replays the trace: each row becomes a streamed completion with that many
// prompt and generated tokens, sent at its timestamp divided by the time scale.
func LoadAzureTrace(path string, o Options) (Generator, error) {
	if path == "" {
		path = DefaultAzureConvPath
	}
	rows, err := LoadAzureFile(path)
	if err != nil {
		return nil, fmt.Errorf("workload azure-conv: %w", err)
	}
	return &azureReplay{o: o, rows: rows, rng: rand.New(rand.NewSource(o.Seed))}, nil
}

func (a *azureReplay) Next() (Request, bool) {
	if a.i >= len(a.rows) {
		return Request{}, false
	}
	row := a.rows[a.i]
	a.i++
	body, _ := json.Marshal(map[string]any{
		"model": a.o.Model, "prompt": Text(a.rng, row.ContextTokens), "stream": true,
		"max_tokens": capTokens(row.GeneratedTokens, a.o.MaxTokensCap), "ignore_eos": true,
		"stream_options": map[string]any{"include_usage": true},
	})
	return Request{
		At: time.Duration(float64(row.Offset) / a.o.TimeScale), Kind: "azure-conv",
		Path: "/v1/completions", Body: body, Stream: true,
	}, true
}

// jsonlLine is one line of a JSONL workload: body is required; path defaults to
// /v1/chat/completions when the body has messages, /v1/completions otherwise.
type jsonlLine struct {
	Path        string            `json:"path"`
	Headers     map[string]string `json:"headers"`
	Body        json.RawMessage   `json:"body"`
	AtMS        float64           `json:"at_ms"`
	Kind        string            `json:"kind"`
	Conditional bool              `json:"conditional"`
}

// ParseJSONL parses a JSONL workload; a malformed line fails with its number.
func ParseJSONL(r io.Reader) ([]Request, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 64<<20)
	var out []Request
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var l jsonlLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		var body map[string]any
		if err := json.Unmarshal(l.Body, &body); err != nil || body == nil {
			return nil, fmt.Errorf("line %d: body: must be a JSON object", n)
		}
		if l.Path == "" {
			l.Path = "/v1/completions"
			if _, ok := body["messages"]; ok {
				l.Path = "/v1/chat/completions"
			}
		}
		if !strings.HasPrefix(l.Path, "/") {
			return nil, fmt.Errorf("line %d: path %q must start with /", n, l.Path)
		}
		if l.AtMS < 0 {
			return nil, fmt.Errorf("line %d: at_ms must be >= 0", n)
		}
		if l.Kind == "" {
			l.Kind = "jsonl"
		}
		stream, _ := body["stream"].(bool)
		out = append(out, Request{
			At: time.Duration(l.AtMS * float64(time.Millisecond)), Kind: l.Kind, Path: l.Path,
			Headers: l.Headers, Body: l.Body, Stream: stream, Conditional: l.Conditional,
		})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("no requests")
	}
	return out, nil
}

// LoadJSONL reads a JSONL workload file.
func LoadJSONL(path string) (Generator, error) {
	reqs, err := parseFile("JSONL", path, ParseJSONL)
	if err != nil {
		return nil, fmt.Errorf("workload: %w", err)
	}
	return List(reqs), nil
}

// LoadAzureFile reads and parses an Azure trace file.
func LoadAzureFile(path string) ([]AzureRow, error) {
	return parseFile("azure trace", path, ParseAzureTrace)
}

// parseFile opens path and parses it: an open error is named by what the file is (os.Open
// names the path), a parse error by the path (parsers name what they read).
func parseFile[T any](what, path string, parse func(io.Reader) (T, error)) (T, error) {
	f, err := os.Open(path)
	if err != nil {
		var zero T
		return zero, fmt.Errorf("%s: %w", what, err)
	}
	defer f.Close()
	v, err := parse(f)
	if err != nil {
		return v, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// List yields reqs in order, once.
func List(reqs []Request) Generator { return listgen.New(reqs) }
