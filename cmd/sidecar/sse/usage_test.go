package sse

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestRewriteUsage(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{in: `{"id":"x","usage":{"prompt_tokens":5,"prompt_tokens_details":{"cached_tokens":0}}}`,
			want: `{"id":"x","usage":{"prompt_tokens":5,"prompt_tokens_details":{"cached_tokens":7}}}`, ok: true},
		{in: `{"usage":{"prompt_tokens":5}}`, want: `{"usage":{"prompt_tokens":5,"prompt_tokens_details":{"cached_tokens":7}}}`, ok: true},
		{in: `{"usage":{"prompt_tokens_details":null}}`, want: `{"usage":{"prompt_tokens_details":{"cached_tokens":7}}}`, ok: true},
		{in: `{"usage":null}`, want: `{"usage":null}`},
		{in: `{"choices":[]}`, want: `{"choices":[]}`},
		{in: `not json`, want: `not json`},
	}
	for _, tt := range tests {
		got, ok := RewriteUsage([]byte(tt.in), 7)
		if string(got) != tt.want || ok != tt.ok {
			t.Errorf("RewriteUsage(%s) = %s, %v; want %s, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

const stream = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n" +
	"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":0}}}\r\n\r\n" +
	": comment\n\n" +
	"data: [DONE]\n\n"

const wantStream = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n" +
	"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":42}}}\r\n\r\n" +
	": comment\n\n" +
	"data: [DONE]\n\n"

// TestWriterEverySplit feeds the stream cut at every byte boundary (and in single bytes).
func TestWriterEverySplit(t *testing.T) {
	for cut := 0; cut <= len(stream); cut++ {
		var out bytes.Buffer
		w := NewWriter(&out, nil, 42, true)
		_, _ = w.Write([]byte(stream[:cut]))
		_, _ = w.Write([]byte(stream[cut:]))
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if out.String() != wantStream {
			t.Fatalf("cut %d:\n got %q\nwant %q", cut, out.String(), wantStream)
		}
	}
	var out bytes.Buffer
	w := NewWriter(&out, nil, 42, true)
	for i := 0; i < len(stream); i++ {
		_, _ = w.Write([]byte{stream[i]})
	}
	_ = w.Close()
	if out.String() != wantStream {
		t.Fatalf("byte by byte: got %q", out.String())
	}
}

// TestWriterPassesCompleteLinesAtOnce: nothing complete is held back, and each write that
// completes a line flushes.
func TestWriterPassesCompleteLinesAtOnce(t *testing.T) {
	var out bytes.Buffer
	flushes := 0
	w := NewWriter(&out, func() { flushes++ }, 1, true)
	_, _ = w.Write([]byte("data: {\"a\":1}\n\ndata: {\"b\""))
	if out.String() != "data: {\"a\":1}\n\n" || flushes != 1 {
		t.Fatalf("got %q after %d flushes", out.String(), flushes)
	}
	_, _ = w.Write([]byte(":2}\n\n"))
	if !strings.HasSuffix(out.String(), "data: {\"b\":2}\n\n") || flushes != 2 {
		t.Fatalf("got %q after %d flushes", out.String(), flushes)
	}
}

func TestWriterTrailingPartialLine(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out, nil, 9, true)
	_, _ = w.Write([]byte(`data: {"usage":{}}`))
	if out.Len() != 0 {
		t.Fatal("a partial line must wait for its newline")
	}
	_ = w.Close()
	if out.String() != `data: {"usage":{"prompt_tokens_details":{"cached_tokens":9}}}` {
		t.Fatalf("got %q", out.String())
	}
}

func TestWriterLongLinePassesThrough(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out, nil, 9, true)
	long := "data: {\"usage\":{},\"x\":\"" + strings.Repeat("a", MaxLine) + "\"}\n"
	_, _ = w.Write([]byte(long[:MaxLine/2]))
	_, _ = w.Write([]byte(long[MaxLine/2:]))
	_, _ = w.Write([]byte("data: {\"usage\":{}}\n"))
	_ = w.Close()
	want := long + "data: {\"usage\":{\"prompt_tokens_details\":{\"cached_tokens\":9}}}\n"
	if out.String() != want {
		t.Fatalf("long line handling wrong (len %d vs %d)", out.Len(), len(want))
	}
}

func TestWriterNonStream(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out, nil, 5, false)
	_, _ = w.Write([]byte(`{"usage":{"prompt_tokens":`))
	_, _ = w.Write([]byte(`1}}`))
	if out.Len() != 0 {
		t.Fatal("non-stream body is rewritten whole")
	}
	_ = w.Close()
	if out.String() != `{"usage":{"prompt_tokens":1,"prompt_tokens_details":{"cached_tokens":5}}}` {
		t.Fatalf("got %s", out.String())
	}
}

// FuzzWriterSplit: for any input and cut point, the output equals the output of writing it
// in one piece, and lines without usage are untouched.
func FuzzWriterSplit(f *testing.F) {
	f.Add([]byte(stream), 10)
	f.Add([]byte("data: {\"usage\":{\"prompt_tokens_details\":{\"cached_tokens\":1}}}\n"), 3)
	f.Add([]byte("data:{\"usage\":[]}\r\ndata: \xff\n"), 1)
	f.Fuzz(func(t *testing.T, b []byte, cut int) {
		if cut < 0 {
			cut = -cut
		}
		cut %= len(b) + 1
		var one, two bytes.Buffer
		w1 := NewWriter(&one, nil, 3, true)
		_, _ = w1.Write(b)
		_ = w1.Close()
		w2 := NewWriter(&two, nil, 3, true)
		_, _ = w2.Write(b[:cut])
		_, _ = w2.Write(b[cut:])
		_ = w2.Close()
		if !bytes.Equal(one.Bytes(), two.Bytes()) {
			t.Fatalf("split at %d changed the output:\n%q\n%q", cut, one.Bytes(), two.Bytes())
		}
		if !bytes.Contains(b, []byte(`"usage"`)) && !bytes.Equal(one.Bytes(), b) {
			t.Fatalf("input without usage modified: %q -> %q", b, one.Bytes())
		}
	})
}

// A line check sees every complete line, split however the stream arrives, and stops the
// writer at the first line it refuses: the lines before it go out, that line and the rest
// never do.
func TestWriterLineCheck(t *testing.T) {
	in := "data: {\"a\":1}\n\ndata: {\"bad\":true}\n\ndata: [DONE]\n\n"
	refused := errors.New("refused")
	check := func(line []byte) (bool, error) {
		if bytes.Contains(line, []byte("bad")) {
			return false, refused
		}
		return false, nil
	}
	for split := 1; split < len(in); split++ {
		for _, rewrite := range []bool{false, true} {
			var out bytes.Buffer
			w := NewLineChecker(&out, nil, check)
			if rewrite {
				w = NewWriter(&out, nil, 7, true)
				w.CheckLines(check)
			}
			_, err1 := w.Write([]byte(in[:split]))
			_, err2 := w.Write([]byte(in[split:]))
			if !errors.Is(err1, refused) && !errors.Is(err2, refused) {
				t.Fatalf("split %d: the refused line passed (%v, %v): %q", split, err1, err2, out.String())
			}
			if out.String() != "data: {\"a\":1}\n\n" {
				t.Fatalf("split %d rewrite %v: %q", split, rewrite, out.String())
			}
			if err := w.Close(); !errors.Is(err, refused) {
				t.Fatalf("Close after a refused line: %v", err)
			}
		}
	}
}

// A dropped line leaves its event out: the line and the blank line after it.
func TestWriterLineDrop(t *testing.T) {
	in := "data: {\"a\":1}\n\ndata: {\"usage\":{}}\n\ndata: [DONE]\n\n"
	for split := 1; split < len(in); split++ {
		var out bytes.Buffer
		w := NewLineChecker(&out, nil, func(line []byte) (bool, error) { return bytes.Contains(line, []byte("usage")), nil })
		_, _ = w.Write([]byte(in[:split]))
		_, _ = w.Write([]byte(in[split:]))
		_ = w.Close()
		if out.String() != "data: {\"a\":1}\n\ndata: [DONE]\n\n" {
			t.Fatalf("split %d: %q", split, out.String())
		}
	}
}
