package server

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/pdgate/pdgate/cmd/sim/batching"
)

// SGLang started with --enable-trace traces a request as a tree of spans whose own start and
// end are the data (python/sglang/srt/tracing): a "Bootstrap Room 0x<room>" span under the
// incoming traceparent, the request's "<mode> Req <first 8 of rid>" span under it, one span
// per process thread that handled the request ("Scheduler [TP 0] (host:… | pid:…)"), and
// under that one slice span per stage, named by the stage. The simulator records that tree
// for the stages it models, from its scheduler's timestamps:
//
//	prefill server: prefill_bootstrap (arrival → queued), prefill_waiting (queued → first
//	                scheduled), prefill_forward (→ first token)
//	decode server:  decode_transferred (arrival → the last of the KV here: waiting for the
//	                prefill, then the transfer), decode_waiting (queued → first scheduled),
//	                decode_forward (→ first token), decode_loop (→ last token)
//	neither:        request_process, prefill_waiting, prefill_forward, decode_loop
//
// It has no tokenizer process (SGLang's "Tokenizer" thread span with tokenize and dispatch),
// and its prefill server publishes the KV at once and charges the transfer to the decode, so
// a prefill leg has no prefill_transfer_kv_cache slice.
const (
	SGLangThreadLabel      = "Scheduler"
	AttrSGLangRoom         = "bootstrap_room"
	AttrSGLangRID          = "rid"
	StageRequestProcess    = "request_process"
	StagePrefillBootstrap  = "prefill_bootstrap"
	StagePrefillWaiting    = "prefill_waiting"
	StagePrefillForward    = "prefill_forward"
	StageDecodeTransferred = "decode_transferred"
	StageDecodeWaiting     = "decode_waiting"
	StageDecodeForward     = "decode_forward"
	StageDecodeLoop        = "decode_loop"
)

// SGLangRoomSpan is the name of the span SGLang starts for a bootstrap room.
func SGLangRoomSpan(room uint64) string { return "Bootstrap Room " + sglangHex(room) }

func sglangHex(room uint64) string { return "0x" + strconv.FormatUint(room, 16) }

// hostID is how SGLang tells hosts apart in its thread spans: /etc/machine-id when readable.
var hostID = sync.OnceValue(func() string {
	if b, err := os.ReadFile("/etc/machine-id"); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b))
	}
	return "unknown"
})

func (x *exchange) sglangSpans(p batching.Progress) {
	tr, end := x.in.opts.Tracer, trace.WithTimestamp(x.wall(p.DoneAt))
	var room uint64
	if x.l.id != "" {
		room, _ = strconv.ParseUint(x.l.id, 10, 64)
	}
	ctx, roomSpan := tr.Start(x.trace.parent, SGLangRoomSpan(room), trace.WithTimestamp(x.trace.start),
		trace.WithAttributes(attribute.String(AttrSGLangRoom, sglangHex(room))))
	rid := x.l.rid
	if rid == "" {
		rid = x.meta.id
	}
	short := rid[strings.LastIndex(rid, "_")+1:] // SGLang drops a multi-tokenizer worker prefix
	if len(short) > 8 {
		short = short[:8]
	}
	mode := x.in.opts.Role
	if mode == RoleCombined {
		mode = "" // SGLang's mode "null" prints as nothing
	}
	ctx, reqSpan := tr.Start(ctx, mode+" Req "+short, trace.WithTimestamp(x.trace.start),
		trace.WithAttributes(attribute.String(AttrSGLangRID, rid)))
	host, pid := hostID(), os.Getpid()
	ctx, thread := tr.Start(ctx, SGLangThreadLabel+" [TP 0] (host:"+host[:min(8, len(host))]+" | pid:"+strconv.Itoa(pid)+")",
		trace.WithTimestamp(x.trace.start), trace.WithAttributes(attribute.Int("tp_rank", 0),
			attribute.String("host_id", host), attribute.Int("pid", pid), attribute.String("thread_label", SGLangThreadLabel)))
	slice := func(name string, from, to time.Time) {
		if from.IsZero() || to.IsZero() || to.Before(from) {
			return
		}
		_, s := tr.Start(ctx, name, trace.WithTimestamp(x.wall(from)))
		s.End(trace.WithTimestamp(x.wall(to)))
	}
	switch x.l.kind {
	case legConsume:
		slice(StageDecodeTransferred, x.arrival, x.trace.kvFinish)
		slice(StageDecodeWaiting, p.SubmittedAt, p.ScheduledAt)
		slice(StageDecodeForward, p.ScheduledAt, p.FirstTokenAt)
	case legProduce:
		slice(StagePrefillBootstrap, x.arrival, p.SubmittedAt)
		slice(StagePrefillWaiting, p.SubmittedAt, p.ScheduledAt)
		slice(StagePrefillForward, p.ScheduledAt, p.FirstTokenAt)
	default:
		slice(StageRequestProcess, x.arrival, p.SubmittedAt)
		slice(StagePrefillWaiting, p.SubmittedAt, p.ScheduledAt)
		slice(StagePrefillForward, p.ScheduledAt, p.FirstTokenAt)
	}
	if p.Generated > 1 {
		slice(StageDecodeLoop, p.FirstTokenAt, p.LastTokenAt)
	}
	thread.End(end)
	reqSpan.End(end)
	roomSpan.End(end)
}
