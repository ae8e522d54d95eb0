package ha

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pdgate/pdgate/test/testsupport"
)

// TestMetricsAuth: with the monitoring sample, Prometheus scrapes with the EPP
// ServiceAccount's token; the EPP authenticates it (TokenReview) and authorizes GET /metrics
// (SubjectAccessReview) with the chart's RBAC. No token gets 401, a token without the grant 403.
func TestMetricsAuth(t *testing.T) {
	suite.NeedControlPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ns, release := "ha-metrics", "mon"
	spec, kc := eppFromChart(ctx, t, ns, release, []string{"config/samples/monitoring.yaml"}, nil)
	// Tracing off: no collector listens here.
	for i, a := range spec.args {
		if a == "--tracing=true" {
			spec.args[i] = "--tracing=false"
		}
	}
	epp := startEPP(t, "epp-metrics", ns, kc, spec)
	testsupport.Eventually(t, 3*time.Minute, "EPP ready", func() bool {
		if epp.exited() {
			t.Fatal("EPP exited")
		}
		return epp.ready(ctx, "inference-extension")
	})

	token := func(sa string) string {
		tr, err := suite.Env.Kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authnv1.TokenRequest{
			Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(600))}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("token for %s: %v", sa, err)
		}
		return tr.Status.Token
	}
	if _, err := suite.Env.Kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "stranger"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	scrape := func(bearer string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", epp.metricsPort), nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var code int
	var body string
	testsupport.Eventually(t, 30*time.Second, "metrics listener", func() bool { code, body = scrape(token(release + "-epp")); return code == http.StatusOK })
	if !strings.Contains(body, "inference_extension_info") {
		t.Errorf("scrape with the EPP token lacks inference_extension_info:\n%.2000s", body)
	}
	if code, _ := scrape(""); code != http.StatusUnauthorized {
		t.Errorf("scrape without a token: %d, want 401", code)
	}
	if code, _ := scrape(token("stranger")); code != http.StatusForbidden {
		t.Errorf("scrape with a token lacking GET /metrics: %d, want 403", code)
	}
}

func ptr[T any](v T) *T { return &v }
