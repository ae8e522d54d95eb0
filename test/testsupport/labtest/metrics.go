package labtest

import (
	"bytes"
	"context"
	"fmt"
	"net/http"

	"github.com/pdgate/pdgate/cmd/pdgate/lab"
	"github.com/pdgate/pdgate/test/testsupport"
)

// Metrics reads the Prometheus page at url into lab.ParseMetrics's name → sum of its samples,
// as `pdgate lab status` reads the lab's processes; a status other than 200 is an error, so a
// process that answers an error page is not mistaken for one with no samples.
func Metrics(url string) (map[string]float64, error) {
	code, b, err := testsupport.Get(context.Background(), url)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("%s: status %d", url, code)
	}
	return lab.ParseMetrics(bytes.NewReader(b))
}
