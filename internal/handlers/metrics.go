package handlers

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/metrics"
	"github.com/crosscheck/crosscheck/internal/telemetry"
)

var (
	httpRequests = metrics.With().NewCounterVec(prometheus.CounterOpts{
		Name: "crosscheck_http_requests_total",
		Help: "HTTP requests by route pattern, method and status.",
	}, []string{"route", "method", "status"})
	httpDuration = metrics.With().NewHistogramVec(prometheus.HistogramOpts{
		Name:    "crosscheck_http_request_duration_seconds",
		Help:    "Time to serve an HTTP request, by route pattern and method (an event stream: as long as it stays open).",
		Buckets: metrics.Latency,
	}, []string{"route", "method"})
	httpInFlight = metrics.With().NewGauge(prometheus.GaugeOpts{
		Name: "crosscheck_http_requests_in_flight",
		Help: "HTTP requests being served now.",
	})
	crowdedClosed = metrics.With().NewCounter(prometheus.CounterOpts{
		Name: "crosscheck_http_crowded_closed_total",
		Help: "Connections waiting for a request (idle keep-alive, or new without a whole first request) closed because a server held 80% of its connections when another arrived.",
	})
	sseOpen = metrics.With().NewGauge(prometheus.GaugeOpts{
		Name: "crosscheck_sse_streams_open",
		Help: "Event streams (GET /v1/queries/{id}/stream) open now in this process.",
	})
)

// routeUnmatched is the route label of a request no route matched: the raw
// path is never a label value.
const routeUnmatched = "unmatched"

// knownMethods bounds the method label; any other method counts as OTHER.
var knownMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
}

// observed serves next within a span of its own and counts each request
// under the route pattern it matched, never its raw path. Use it as the
// router's first middleware. A request's traceparent is the caller's word:
// the span starts a trace of the service's own, sampled by the service,
// with a link to the caller's span, so that a caller can neither choose
// its trace id nor (with flags 00) keep its requests out of the traces;
// with trustCaller (an operator's callers it trusts, such as its own
// gateway) the span continues the caller's trace instead. While the
// process traces nothing (no tracer provider installed), a request gets no
// span, so the HTTP layer costs what the counting costs.
func observed(trustCaller bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler { return observe(next, trustCaller) }
}

func observe(next http.Handler, trustCaller bool) http.Handler {
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httpInFlight.Inc()
		defer httpInFlight.Dec()
		start := time.Now()
		var routes chi.Routes
		rc := chi.RouteContext(r.Context())
		if rc != nil {
			routes = rc.Routes
		}
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		route := routePattern(rc, routes, r)
		method := r.Method
		if !knownMethods[method] {
			method = "OTHER"
		}
		status := ww.Status()
		if status == 0 {
			status = http.StatusOK
		}
		httpRequests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
		httpDuration.WithLabelValues(route, method).Observe(time.Since(start).Seconds())
		if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
			span.SetName(method + " " + route)
			span.SetAttributes(attribute.String("http.route", route))
		}
	})
	traced := otelhttp.NewHandler(counted, "http", otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
		return r.Method
	}), otelhttp.WithPublicEndpointFn(func(*http.Request) bool { return !trustCaller }))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !telemetry.Tracing() {
			counted.ServeHTTP(w, r)
			return
		}
		traced.ServeHTTP(w, r)
	})
}

// routePattern returns the pattern of the route r matched, or
// routeUnmatched. A request a middleware answered before the routing ended
// (a refused token) has the pattern of the route it would have reached.
func routePattern(rc *chi.Context, routes chi.Routes, r *http.Request) string {
	if rc == nil {
		return routeUnmatched
	}
	p := rc.RoutePattern()
	if strings.HasSuffix(p, "/*") && routes != nil {
		p = routes.Find(chi.NewRouteContext(), r.Method, r.URL.Path)
	}
	if p == "" || strings.HasSuffix(p, "/*") {
		return routeUnmatched
	}
	return p
}

// streamOpened counts an open event stream until the returned function is
// called.
func streamOpened() (closed func()) {
	sseOpen.Inc()
	return sseOpen.Dec
}

// MetricsHandler serves /metrics, /healthz and /readyz (s's readiness):
// the admin address of a process that runs no admin API (a worker).
func (s *Server) MetricsHandler() http.Handler {
	r := chi.NewRouter()
	r.Use(recoverer)
	r.Get("/healthz", healthz)
	r.Get("/readyz", s.readyz)
	r.Get("/metrics", s.scrape)
	r.NotFound(s.noRoute)
	r.MethodNotAllowed(s.noMethod)
	return r
}

// maxScrapes bounds the scrapes of /metrics that run at once in a process.
const maxScrapes = 4

// scrapes holds a slot per scrape running.
var scrapes = make(chan struct{}, maxScrapes)

// scrape serves the process's metrics, or refuses with 429 rate_limited
// when maxScrapes are running already.
func (s *Server) scrape(w http.ResponseWriter, r *http.Request) {
	select {
	case scrapes <- struct{}{}:
		defer func() { <-scrapes }()
	default:
		s.writeError(w, r, &apperr.Error{Code: apperr.RateLimited, RetryAfter: 1,
			Message: fmt.Sprintf("%d scrapes of /metrics are running already; scrape less often", maxScrapes)}, "")
		return
	}
	metricsHandler.ServeHTTP(w, r)
}

var metricsHandler = metrics.Handler()

// queryTraces is what links a query's event stream to the query's trace.
type queryTraces interface {
	QueryTrace(ctx context.Context, requestID string) trace.SpanContext
}

// linkQueryTrace links the span of r, when it is recorded, to the trace the
// query id was submitted under, so the stream that follows a query is found
// from the query's trace. Nothing is read when traces are not recorded.
func (s *Server) linkQueryTrace(r *http.Request, id string) {
	span := trace.SpanFromContext(r.Context())
	if !span.IsRecording() {
		return
	}
	if qt, ok := s.Events.(queryTraces); ok {
		if sc := qt.QueryTrace(r.Context(), id); sc.IsValid() {
			span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.String("crosscheck.link", "query")}})
		}
	}
}
