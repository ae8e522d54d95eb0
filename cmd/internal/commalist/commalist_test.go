package commalist

import (
	"slices"
	"testing"
)

func TestSplit(t *testing.T) {
	for in, want := range map[string][]string{
		"":          nil,
		" , ,":      nil,
		"a":         {"a"},
		"a, b,,c ,": {"a", "b", "c"},
		" x=1 , y ": {"x=1", "y"},
	} {
		if got := Split(in); !slices.Equal(got, want) {
			t.Errorf("Split(%q) = %q, want %q", in, got, want)
		}
	}
}
