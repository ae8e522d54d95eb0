package simbench

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// Every fleet bench takes --profile and --scrape-interval from fleetFlags: the same default
// profile (the one loadProfile falls back to) and the command's own scrape default, and
// --scrape-interval sets the options the run reads.
func TestFleetFlagsAlike(t *testing.T) {
	tests := []struct {
		name   string
		cmd    func() *cobra.Command
		scrape time.Duration
	}{
		{name: "sim", cmd: NewCommand, scrape: Defaults().Scrape},
		{name: "goodput", cmd: NewGoodputCommand, scrape: GoodputDefaults().Scrape},
		{name: "prefix", cmd: NewPrefixCommand, scrape: 50 * time.Millisecond},
		{name: "advisor", cmd: NewAdvisorCommand, scrape: AdvisorDefaults().Scrape},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.cmd().Flags()
			p := f.Lookup("profile")
			if p == nil || p.DefValue != "" || !strings.Contains(p.Usage, DefaultProfile) {
				t.Fatalf("--profile = %+v, want default \"\" and usage naming %s", p, DefaultProfile)
			}
			s := f.Lookup("scrape-interval")
			if s == nil || s.DefValue != tt.scrape.String() {
				t.Fatalf("--scrape-interval = %+v, want default %v", s, tt.scrape)
			}
			if err := f.Parse([]string{"--scrape-interval=7ms", "--profile=x.yaml"}); err != nil {
				t.Fatal(err)
			}
			if got, _ := f.GetDuration("scrape-interval"); got != 7*time.Millisecond {
				t.Fatalf("--scrape-interval parsed as %v", got)
			}
		})
	}
}
