package encodercache

import "testing"

func TestKeyAndClone(t *testing.T) {
	for producer, want := range map[string]string{
		"":     "MultiModalEncoderCacheMatchInfoKey/mm-embeddings-cache-producer",
		"mine": "MultiModalEncoderCacheMatchInfoKey/mine",
	} {
		if got := Key(producer); got != want {
			t.Errorf("Key(%q) = %q, want %q", producer, got, want)
		}
	}
	m := &MatchInfo{Matched: 1, Total: 2}
	c := m.Clone().(*MatchInfo)
	c.Matched = 2
	if m.Matched != 1 || (*MatchInfo)(nil).Clone() != nil {
		t.Error("Clone must copy, and keep nil nil")
	}
}
