package ttltable

import (
	"testing"
	"time"
)

func TestTable(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type step struct {
		op        string // put, get, sweep
		key       string
		val       int
		at        time.Duration // after t0
		wantOK    bool          // put: stored; get: found
		wantVal   int           // get
		wantSwept int           // sweep
		wantLen   int
	}
	tests := []struct {
		name  string
		max   int
		steps []step
	}{
		{name: "write, read, expire at the TTL's end", max: 2, steps: []step{
			{op: "put", key: "a", val: 1, wantOK: true, wantLen: 1},
			{op: "get", key: "a", at: 10 * time.Second, wantOK: true, wantVal: 1, wantLen: 1},
			{op: "get", key: "a", at: 10*time.Second + 1, wantOK: false, wantLen: 1},
			{op: "sweep", at: 10*time.Second + 1, wantSwept: 1, wantLen: 0},
		}},
		{name: "a rewrite restarts the TTL", max: 2, steps: []step{
			{op: "put", key: "a", val: 1, wantOK: true, wantLen: 1},
			{op: "put", key: "a", val: 2, at: 8 * time.Second, wantOK: true, wantLen: 1},
			{op: "get", key: "a", at: 15 * time.Second, wantOK: true, wantVal: 2, wantLen: 1},
			{op: "sweep", at: 15 * time.Second, wantSwept: 0, wantLen: 1},
		}},
		{name: "full: a new key is refused, a held one (even expired) is rewritten", max: 2, steps: []step{
			{op: "put", key: "a", val: 1, wantOK: true, wantLen: 1},
			{op: "put", key: "b", val: 2, at: 5 * time.Second, wantOK: true, wantLen: 2},
			{op: "put", key: "c", val: 3, at: 6 * time.Second, wantOK: false, wantLen: 2},
			{op: "get", key: "c", at: 6 * time.Second, wantOK: false, wantLen: 2},
			{op: "put", key: "a", val: 4, at: 11 * time.Second, wantOK: true, wantLen: 2},
			{op: "get", key: "a", at: 11 * time.Second, wantOK: true, wantVal: 4, wantLen: 2},
		}},
		{name: "a sweep makes room", max: 1, steps: []step{
			{op: "put", key: "a", val: 1, wantOK: true, wantLen: 1},
			{op: "put", key: "b", val: 2, at: 11 * time.Second, wantOK: false, wantLen: 1},
			{op: "sweep", at: 11 * time.Second, wantSwept: 1, wantLen: 0},
			{op: "put", key: "b", val: 2, at: 11 * time.Second, wantOK: true, wantLen: 1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := New[string, int](10*time.Second, tt.max)
			for i, s := range tt.steps {
				now := t0.Add(s.at)
				switch s.op {
				case "put":
					if got := tb.Put(s.key, s.val, now); got != s.wantOK {
						t.Fatalf("step %d: Put(%s) = %v, want %v", i, s.key, got, s.wantOK)
					}
				case "get":
					if v, ok := tb.Get(s.key, now); ok != s.wantOK || v != s.wantVal {
						t.Fatalf("step %d: Get(%s) = %d, %v, want %d, %v", i, s.key, v, ok, s.wantVal, s.wantOK)
					}
				case "sweep":
					if n := tb.Sweep(now); n != s.wantSwept {
						t.Fatalf("step %d: Sweep = %d, want %d", i, n, s.wantSwept)
					}
				}
				if n := tb.Len(); n != s.wantLen {
					t.Fatalf("step %d (%s): Len = %d, want %d", i, s.op, n, s.wantLen)
				}
			}
		})
	}
}
