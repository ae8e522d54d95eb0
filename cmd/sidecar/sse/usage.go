// Package sse rewrites usage.prompt_tokens_details.cached_tokens in decode responses, both
// whole JSON bodies and Server-Sent Events streams, without holding back decode output: an
// SSE stream is passed through line by line as bytes arrive; only an incomplete line (one
// event split across network reads) waits for its newline.
package sse

import (
	"bytes"
	"io"
	"strconv"

	"github.com/pdgate/pdgate/cmd/sidecar/jsonbody"
)

// MaxLine bounds the bytes held for one incomplete SSE line. A longer line is passed through
// unmodified rather than buffered without bound.
const MaxLine = 1 << 20

// RewriteUsage sets usage.prompt_tokens_details.cached_tokens to cached in a JSON object,
// creating prompt_tokens_details when usage exists without it. Bodies without a usage object
// (or that do not parse) are returned unchanged with ok=false.
func RewriteUsage(body []byte, cached int64) (out []byte, ok bool) {
	obj, err := jsonbody.Parse(body)
	if err != nil {
		return body, false
	}
	usage, found := obj.Object("usage")
	if !found {
		return body, false
	}
	details, found := usage.Object("prompt_tokens_details")
	if !found {
		details = jsonbody.New()
	}
	details.SetRaw("cached_tokens", []byte(strconv.FormatInt(cached, 10)))
	usage.SetObject("prompt_tokens_details", details)
	obj.SetObject("usage", usage)
	return obj.Bytes(), true
}

// Writer rewrites cached_tokens in what is written through it and forwards it to W, calling
// Flush after every write that produced output.
type Writer struct {
	w       io.Writer
	flush   func()
	cached  int64
	rewrite bool
	stream  bool
	// check, when set, sees every complete SSE line before it is written: drop leaves the
	// line (and the blank line ending its event) out; an error stops the writer there (that
	// line and everything after it are never written).
	check func(line []byte) (drop bool, err error)
	// dropBlank: the last line was dropped; the blank line after it goes too.
	dropBlank bool
	buf       []byte
	// passLine is set while an over-long line is being passed through unmodified.
	passLine bool
	err      error
}

// NewWriter returns a rewriter. stream selects SSE mode (line by line); otherwise the whole
// body is buffered and rewritten on Close (a non-streaming response is one JSON document).
func NewWriter(w io.Writer, flush func(), cached int64, stream bool) *Writer {
	if flush == nil {
		flush = func() {}
	}
	return &Writer{w: w, flush: flush, cached: cached, rewrite: true, stream: stream}
}

// NewLineChecker returns an SSE writer that rewrites nothing and passes every complete line
// through check first.
func NewLineChecker(w io.Writer, flush func(), check func(line []byte) (drop bool, err error)) *Writer {
	if flush == nil {
		flush = func() {}
	}
	return &Writer{w: w, flush: flush, stream: true, check: check}
}

// CheckLines makes the writer pass every complete SSE line through check before it is
// written (stream mode only).
func (s *Writer) CheckLines(check func(line []byte) (drop bool, err error)) { s.check = check }

// emit writes what the lines so far produced, then records err (nil: nothing failed).
func (s *Writer) emit(out []byte, err error) error {
	if len(out) > 0 {
		if _, werr := s.w.Write(out); werr != nil {
			s.err = werr
			return werr
		}
		s.flush()
	}
	s.err = err
	return err
}

// line is one complete line as it goes out (nil: left out): checked, then rewritten.
func (s *Writer) line(line []byte) ([]byte, error) {
	if s.check != nil {
		if s.dropBlank {
			s.dropBlank = false
			if len(bytes.TrimRight(line, "\r\n")) == 0 {
				return nil, nil
			}
		}
		drop, err := s.check(line)
		if err != nil {
			return nil, err
		}
		if drop {
			s.dropBlank = true
			return nil, nil
		}
	}
	if !s.rewrite || len(line) > MaxLine {
		return line, nil
	}
	return rewriteLine(line, s.cached), nil
}

// Write implements io.Writer.
func (s *Writer) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	if !s.stream {
		s.buf = append(s.buf, p...)
		return len(p), nil
	}
	n := len(p)
	var out []byte
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if s.passLine {
				out = append(out, p...)
			} else if len(s.buf)+len(p) > MaxLine {
				out = append(out, s.buf...)
				out = append(out, p...)
				s.buf = s.buf[:0]
				s.passLine = true
			} else {
				s.buf = append(s.buf, p...)
			}
			break
		}
		line := p[:i+1]
		p = p[i+1:]
		if s.passLine {
			out = append(out, line...)
			s.passLine = false
			continue
		}
		if len(s.buf) > 0 {
			s.buf = append(s.buf, line...)
			line = s.buf
		}
		l, err := s.line(line)
		s.buf = s.buf[:0]
		if err != nil {
			return 0, s.emit(out, err)
		}
		out = append(out, l...)
	}
	if err := s.emit(out, nil); err != nil {
		return 0, err
	}
	return n, nil
}

// Close writes what is still held (a trailing partial line, or the whole non-stream body).
func (s *Writer) Close() error {
	if s.err != nil {
		return s.err
	}
	if len(s.buf) == 0 {
		return nil
	}
	var out []byte
	if s.stream {
		var err error
		if out, err = s.line(s.buf); err != nil {
			s.buf = nil
			return s.emit(nil, err)
		}
	} else {
		out, _ = RewriteUsage(s.buf, s.cached)
	}
	s.buf = nil
	return s.emit(out, nil)
}

// rewriteLine rewrites one SSE line (terminator included) when it is a data line carrying a
// JSON object with usage.
func rewriteLine(line []byte, cached int64) []byte {
	body := line
	term := 0
	for term < len(body) && (body[len(body)-1-term] == '\n' || body[len(body)-1-term] == '\r') {
		term++
	}
	body = body[:len(body)-term]
	if !bytes.HasPrefix(body, []byte("data:")) {
		return line
	}
	payload := body[len("data:"):]
	sp := 0
	if len(payload) > 0 && payload[0] == ' ' {
		sp = 1
	}
	js := payload[sp:]
	if len(js) == 0 || js[0] != '{' || !bytes.Contains(js, []byte(`"usage"`)) {
		return line
	}
	rewritten, ok := RewriteUsage(js, cached)
	if !ok {
		return line
	}
	out := make([]byte, 0, len(line)+16)
	out = append(out, body[:len("data:")+sp]...)
	out = append(out, rewritten...)
	out = append(out, line[len(line)-term:]...)
	return out
}
