package server

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/pdgate/pdgate/cmd/sim/batching"
)

// sharedStorage is the vLLM shared-storage connector's store: one file per chained block
// hash in a directory every server of the pool can read (LMCache-style). A file older than
// the TTL counts as absent.
type sharedStorage struct {
	dir   string
	clock batching.Clock
	ttl   time.Duration
}

func newSharedStorage(dir string, clock batching.Clock, ttl time.Duration) (*sharedStorage, error) {
	d := filepath.Join(dir, "kv")
	if err := os.MkdirAll(d, 0o755); err != nil {
		return nil, fmt.Errorf("shared storage: %w", err)
	}
	return &sharedStorage{dir: d, clock: clock, ttl: ttl}, nil
}

func (s *sharedStorage) path(h uint64) string { return filepath.Join(s.dir, strconv.FormatUint(h, 16)) }

// match counts the leading blocks present and fresh. The file holds the model time of the
// write (the TTL runs on the model clock, like everything else).
func (s *sharedStorage) match(hashes []uint64) int {
	now := s.clock.Now()
	for i, h := range hashes {
		b, err := os.ReadFile(s.path(h))
		if err != nil {
			return i
		}
		ns, err := strconv.ParseInt(string(b), 10, 64)
		if err != nil || now.Sub(time.Unix(0, ns)) > s.ttl {
			return i
		}
	}
	return len(hashes)
}

func (s *sharedStorage) store(hashes []uint64) error {
	stamp := []byte(strconv.FormatInt(s.clock.Now().UnixNano(), 10))
	for _, h := range hashes {
		tmp := s.path(h) + ".tmp" + strconv.FormatInt(time.Now().UnixNano(), 36)
		if err := os.WriteFile(tmp, stamp, 0o644); err != nil {
			return fmt.Errorf("shared storage write: %w", err)
		}
		if err := os.Rename(tmp, s.path(h)); err != nil {
			return fmt.Errorf("shared storage write: %w", err)
		}
	}
	return nil
}

// ecCache records encoded multimodal items (the EC connector's store): a directory when one
// is configured (shared across processes), else a process-wide map (shared across the
// instances of one process).
type ecCache struct{ dir string }

var processEC sync.Map

func newECCache(dir string) *ecCache {
	if dir != "" {
		d := filepath.Join(dir, "ec")
		if err := os.MkdirAll(d, 0o755); err == nil {
			return &ecCache{dir: d}
		}
	}
	return &ecCache{}
}

func (c *ecCache) has(item string) bool {
	if c.dir != "" {
		_, err := os.Stat(filepath.Join(c.dir, item))
		return err == nil
	}
	_, ok := processEC.Load(item)
	return ok
}

func (c *ecCache) put(item string) error {
	if c.dir != "" {
		return os.WriteFile(filepath.Join(c.dir, item), []byte("1"), 0o644)
	}
	processEC.Store(item, true)
	return nil
}

// missing counts the items not in the cache.
func (c *ecCache) missing(items []string) int {
	n := 0
	for _, it := range items {
		if !c.has(it) {
			n++
		}
	}
	return n
}
