package testsupport

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Answer is what one client of an OpenAI-compatible server (the gateway, a sidecar) saw.
type Answer struct {
	Status  int // 0 when no answer came
	Header  http.Header
	Body    []byte // the body, or the lines of a 200 stream
	Done    bool   // a 200 stream ended with [DONE], or another body was read whole
	Err     error
	Elapsed time.Duration
}

// Do sends req with c and reads the answer: a 200 answer to a streamed request line by line to
// its end, any other answer whole (up to 1 MiB).
func Do(c *http.Client, req *http.Request, stream bool) Answer {
	begin := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return Answer{Err: err, Elapsed: time.Since(begin)}
	}
	defer resp.Body.Close()
	a := Answer{Status: resp.StatusCode, Header: resp.Header}
	if !stream || resp.StatusCode != http.StatusOK {
		a.Body, a.Err = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		a.Done = a.Err == nil
	} else {
		sc := bufio.NewScanner(resp.Body)
		var buf bytes.Buffer
		for sc.Scan() {
			line := sc.Text()
			buf.WriteString(line + "\n")
			if strings.TrimSpace(line) == "data: [DONE]" {
				a.Done = true
			}
		}
		a.Body = buf.Bytes()
	}
	a.Elapsed = time.Since(begin)
	return a
}

// Outcome classifies a: "lost" (no answer), "200", "cut" (a 200 stream broken before
// [DONE], the documented signal once headers went out), "<status>/<x-error-pd-* header>"
// when a sidecar says which leg failed, "<status>/<errorBody(body)>", or
// "<status>/undocumented" when errorBody returns "".
func Outcome(a Answer, errorBody func([]byte) string) string {
	switch {
	case a.Status == 0:
		return "lost"
	case a.Status == http.StatusOK && a.Done:
		return "200"
	case a.Status == http.StatusOK:
		return "cut"
	}
	for _, h := range []string{"x-error-pd-prefill", "x-error-pd-decode", "x-error-pd-encode"} {
		if a.Header.Get(h) == "true" {
			return strconv.Itoa(a.Status) + "/" + h
		}
	}
	if kind := errorBody(a.Body); kind != "" {
		return strconv.Itoa(a.Status) + "/" + kind
	}
	return strconv.Itoa(a.Status) + "/undocumented"
}
