package server

import (
	"flag"
	"fmt"
	"net/http"
	"strconv"
)

// Data-parallel ranks, modelled on vLLM's --data-parallel-size with one API server per rank
// (llm-d's wide-EP/DP layout: ranks on consecutive ports 8000..8000+N-1): each rank is its
// own engine, with its own port, scheduler, KV cache, engine id and metrics. A prefill
// rank reports its rank in kv_transfer_params.remote_dp_rank (and its own port as
// remote_port, the side channel a decode rank pulls from), so a routing sidecar can pin the
// decode leg to the same rank. Every response of a rank carries HeaderDPRank.

// HeaderDPRank names the data-parallel rank that answered (set only with DataParallelSize > 1).
const HeaderDPRank = "x-sim-dp-rank"

// bindDataParallelFlags registers --data-parallel-size.
func (o *Options) bindDataParallelFlags(fs *flag.FlagSet) {
	fs.IntVar(&o.DataParallelSize, "data-parallel-size", 1, "data-parallel ranks served by this process: rank r on --port + r, each its own engine and KV cache (vllm only)")
}

// dataParallel reports whether the instance is one rank of several.
func (o *Options) dataParallel() bool { return o.DataParallelSize > 1 }

// validDataParallel checks the rank options.
func validDataParallel(o *Options) error {
	if o.DataParallelSize < 0 || o.DataParallelSize > 64 {
		return fmt.Errorf("dataParallelSize must be in 0..64, got %d", o.DataParallelSize)
	}
	if !o.dataParallel() {
		if o.DataParallelRank != 0 {
			return fmt.Errorf("dataParallelRank %d needs dataParallelSize > 1", o.DataParallelRank)
		}
		return nil
	}
	if o.Dialect != DialectVLLM {
		return fmt.Errorf("dataParallelSize > 1 is supported for the vllm dialect only, got %q", o.Dialect)
	}
	if o.DataParallelRank < 0 || o.DataParallelRank >= o.DataParallelSize {
		return fmt.Errorf("dataParallelRank must be in 0..%d, got %d", o.DataParallelSize-1, o.DataParallelRank)
	}
	if o.Port == 0 {
		return fmt.Errorf("dataParallelSize > 1 needs a fixed port (rank r listens on port + r)")
	}
	return nil
}

// ExpandDataParallel turns one instance's options with DataParallelSize N > 1 into N rank
// instances: rank r on Port + r, seed Seed + r, named "<name>-rank-<r>". Options without
// ranks come back unchanged; a KV-event topic or ZeroMQ bind address shared by every rank
// is the caller's to make distinct (the default topic already names each rank's port).
func ExpandDataParallel(o Options) []Options {
	if o.DataParallelSize <= 1 {
		return []Options{o}
	}
	out := make([]Options, 0, o.DataParallelSize)
	for r := 0; r < o.DataParallelSize; r++ {
		ro := o
		ro.DataParallelRank = r
		if o.Port != 0 {
			ro.Port = o.Port + r
		}
		ro.Seed = o.Seed + uint64(r)
		name := o.Name
		if name == "" {
			name = "sim"
		}
		ro.Name = name + "-rank-" + strconv.Itoa(r)
		out = append(out, ro)
	}
	return out
}

// withDPRank marks every response of a rank with its rank.
func (in *Instance) withDPRank(h http.Handler) http.Handler {
	if !in.opts.dataParallel() {
		return h
	}
	rank := strconv.Itoa(in.opts.DataParallelRank)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(HeaderDPRank, rank)
		h.ServeHTTP(w, r)
	})
}

// dpFields adds the rank to a vLLM prefill leg's kv_transfer_params.
func (in *Instance) dpFields(params map[string]any) map[string]any {
	if in.opts.dataParallel() {
		params["remote_dp_rank"] = in.opts.DataParallelRank
	}
	return params
}
