package pdknobs

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// EnvPodMetricRefreshInterval is AIBrix's scrape period of pod metrics, in milliseconds. In
// pdgate the same setting is the EPP's --refresh-metrics-interval (GIE's data-layer poll period).
const EnvPodMetricRefreshInterval = "AIBRIX_POD_METRIC_REFRESH_INTERVAL_MS"

// MinRefreshInterval is the data layer's floor: below it every pod is scraped faster than an
// engine refreshes its own counters, which only burns CPU.
const MinRefreshInterval = 10 * time.Millisecond

// RefreshMetricsIntervalFromEnv reads AIBRIX_POD_METRIC_REFRESH_INTERVAL_MS for the EPP binary,
// which uses it as the default of --refresh-metrics-interval (an explicit flag wins). ok is
// false when the variable is unset; a value that is not an integer number of milliseconds of
// at least MinRefreshInterval is an error naming the variable, so a typo fails the EPP's start
// instead of silently scraping at another rate.
func RefreshMetricsIntervalFromEnv(getenv pluginkit.Env) (d time.Duration, ok bool, err error) {
	v, set := getenv(EnvPodMetricRefreshInterval)
	if !set || strings.TrimSpace(v) == "" {
		return 0, false, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || time.Duration(n)*time.Millisecond < MinRefreshInterval {
		return 0, false, fmt.Errorf("environment %s=%q: want an integer number of milliseconds >= %d",
			EnvPodMetricRefreshInterval, v, MinRefreshInterval.Milliseconds())
	}
	return time.Duration(n) * time.Millisecond, true, nil
}
