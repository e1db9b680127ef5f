/* weft-bench --report DIR: an HTML page with SVG figures drawn here, from
 * the run's JSON document (the one --json writes) and, for the timeline, a
 * Chrome trace-event file. See docs/benchmarks.md, "The report".
 *
 * The page (DIR/index.html) is self-contained: every figure is inline SVG,
 * the JSON is embedded (escaped) in a <pre>, nothing is fetched. Every
 * figure is also written on its own (DIR/<figure>.svg). The markup is XHTML
 * served as HTML: well-formed XML (xmllint --noout checks it) that browsers
 * read as HTML5. */
#ifndef WEFT_BENCH_REPORT_H
#define WEFT_BENCH_REPORT_H

#include <stdbool.h>

/* Creates |dir| when missing (its parent must exist) and checks that a file
 * can be written there, so that a bad --report fails before the run. Returns
 * false after printing why on stderr. */
bool wb_report_prepare(const char *dir);

/* Writes the report into |dir| from |results_json| (the --json document).
 * |trace_path|, when not NULL, is a Chrome trace-event file ({"traceEvents":
 * [{"name", "ph", "ts", "dur", "pid", "tid", "args"}, ...]}) drawn as the
 * timeline, titled |trace_title|. Returns 0, or 1 after printing why on
 * stderr (a malformed trace is reported and the page is written without it:
 * 1 all the same). */
int wb_report_write(const char *dir, const char *results_json, const char *trace_path,
                    const char *trace_title);

/* Whether this build has the trace API (weft_trace_begin/end). */
bool wb_report_can_trace(void);

/* Records the timeline's workload into |path| with weft_trace_begin/end: a
 * few layers of launches over 4 streams with one injected failure, so that
 * a failure, its skipped dependents and cross-stream waits show. Returns
 * false (after saying why) in a build without the trace API, or when a
 * weft call fails. */
bool wb_report_record_trace(const char *path);

#endif /* WEFT_BENCH_REPORT_H */
