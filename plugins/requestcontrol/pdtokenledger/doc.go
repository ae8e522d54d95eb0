// Package pdtokenledger is the pd-token-ledger plugin: the token-load ledger the token_load and
// hybrid_cache_load policies read (per-pod prefill active/kv and decode token charges with
// sessions, TTLs, a janitor, metrics and an optional Redis-shared decode ledger), tied to the
// request lifecycle. Scorers program against plugins/lib/tokenload, which Tracker implements.
package pdtokenledger
