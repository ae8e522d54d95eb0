package protocol

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestErrorBody(t *testing.T) {
	tests := []struct {
		name         string
		status       int
		typ, msg, pr string
		want         string
	}{
		{name: "vLLM shape, null param", status: 400, typ: "BadRequestError", msg: "bad",
			want: `{"error":{"message":"bad","type":"BadRequestError","param":null,"code":400}}`},
		{name: "param set", status: 404, typ: "NotFoundError", msg: "The model `x` does not exist.", pr: "model",
			want: `{"error":{"message":"The model ` + "`x`" + ` does not exist.","type":"NotFoundError","param":"model","code":404}}`},
		{name: "empty type is the status's", status: 429, msg: "m",
			want: `{"error":{"message":"m","type":"rate_limit_error","param":null,"code":429}}`},
		{name: "html characters stay readable", status: 500, msg: "a<b>&c",
			want: `{"error":{"message":"a<b>&c","type":"server_error","param":null,"code":500}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(ErrorBodyParam(tt.status, tt.typ, tt.msg, tt.pr))
			if got != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
			if tt.pr == "" && string(ErrorBody(tt.status, tt.typ, tt.msg)) != tt.want {
				t.Fatalf("ErrorBody differs from ErrorBodyParam with no param")
			}
		})
	}
}

func TestTypeForStatus(t *testing.T) {
	for status, want := range map[int]string{
		400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
		404: "not_found_error", 412: "invalid_request_error", 413: "invalid_request_error",
		429: "rate_limit_error", 500: "server_error", 502: "server_error", 503: "server_error", 504: "server_error",
	} {
		if got := TypeForStatus(status); got != want {
			t.Errorf("TypeForStatus(%d) = %q, want %q", status, got, want)
		}
	}
}

func TestWriteError(t *testing.T) {
	rec := httptest.NewRecorder()
	rec.Header().Set(HeaderErrorPrefill, "true")
	rec.Header().Set("Content-Type", "text/plain")
	WriteError(rec, http.StatusBadGateway, "", "upstream gone")
	if rec.Code != 502 || rec.Header().Get("Content-Type") != "application/json" || rec.Header().Get(HeaderErrorPrefill) != "true" {
		t.Fatalf("status %d, headers %v", rec.Code, rec.Header())
	}
	if cl := rec.Header().Get("Content-Length"); cl != "83" || len(rec.Body.Bytes()) != 83 {
		t.Fatalf("content-length %s for %d bytes: %s", cl, rec.Body.Len(), rec.Body)
	}
	var e OpenAIError
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Code != 502 || e.Error.Message != "upstream gone" || e.Error.Param != nil {
		t.Fatalf("body %s: %v", rec.Body, err)
	}
}

func TestIsModelNotFound(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		want   bool
	}{
		{"vLLM nested", 404, string(ModelNotFoundBody("x")), true},
		{"vLLM nested without param", 404, `{"error":{"message":"The model ` + "`x`" + ` does not exist.","type":"NotFoundError","param":null,"code":404}}`, true},
		{"vLLM flat (older)", 404, `{"object":"error","message":"The model ` + "`x`" + ` does not exist.","type":"NotFoundError","param":null,"code":404}`, true},
		{"OpenAI code", 404, `{"error":{"message":"no such thing","type":"invalid_request_error","param":null,"code":"model_not_found"}}`, true},
		{"param model", 404, `{"error":{"message":"nope","type":"x","param":"model","code":404}}`, true},
		{"path 404", 404, `{"detail":"Not Found"}`, false},
		{"KV handoff 404", 404, `{"error":{"message":"no KV handoff with id \"a\" on this server","type":"NotFoundError","param":null,"code":404}}`, false},
		{"text 404", 404, `404 page not found`, false},
		{"not a 404", 400, string(ModelNotFoundBody("x")), false},
		{"empty", 404, ``, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsModelNotFound(tt.status, []byte(tt.body)); got != tt.want {
				t.Fatalf("IsModelNotFound(%d, %s) = %v", tt.status, tt.body, got)
			}
		})
	}
}

func TestConditionalDecodeBodyIsJSON(t *testing.T) {
	var e OpenAIError
	if err := json.Unmarshal([]byte(ConditionalDecodeBody), &e); err != nil || e.Error.Code != 412 ||
		e.Error.Message != ConditionalDecodeMessage || e.Error.Type != "invalid_request_error" {
		t.Fatalf("%s: %v", ConditionalDecodeBody, err)
	}
}
