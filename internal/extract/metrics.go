package extract

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/crosscheck/crosscheck/internal/metrics"
)

var (
	extractions = metrics.With().NewCounterVec(prometheus.CounterOpts{
		Name: "crosscheck_extractions_total",
		Help: "Files extracted in a child process, by format and outcome: ok, malformed, crashed, timeout, cpu, memory (the limit the child reached).",
	}, []string{"format", "outcome"})
	extractCPU = metrics.With().NewCounterVec(prometheus.CounterOpts{
		Name: "crosscheck_extract_cpu_seconds_total",
		Help: "CPU time the extraction children used, by format.",
	}, []string{"format"})
	childrenRunning = metrics.With().NewGauge(prometheus.GaugeOpts{
		Name: "crosscheck_extract_children_running",
		Help: "Extraction children running now.",
	})
	childrenMax = metrics.With().NewGauge(prometheus.GaugeOpts{
		Name: "crosscheck_extract_children_max",
		Help: "Extraction children that may run at once: the memory budget over one child's memory limit, at most the parallel bound.",
	})
	memoryBudget = metrics.With().NewGauge(prometheus.GaugeOpts{
		Name: "crosscheck_extract_memory_budget_bytes",
		Help: "The memory limits of the extraction children that may run at once, added up.",
	})
	accountRefusals = metrics.With().NewCounterVec(prometheus.CounterOpts{
		Name: "crosscheck_extract_account_refusals_total",
		Help: "Extractions refused for their account, by reason: cpu (it used its CPU time for the hour).",
	}, []string{"reason"})
)

// The series of the formats extracted in a child, their outcomes and the
// refusal reason exist from the start, at 0.
func init() {
	for _, f := range []string{FormatPDF, FormatDOCX, FormatDOC, FormatHTML} {
		extractCPU.WithLabelValues(f)
		for _, o := range []string{"ok", "malformed", "crashed", "timeout", "cpu", "memory"} {
			extractions.WithLabelValues(f, o)
		}
	}
	accountRefusals.WithLabelValues("cpu")
}
