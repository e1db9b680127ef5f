/* weft-bench --report (bench/report.h): the figures, drawn as SVG from the
 * JSON document of the run and from a Chrome trace-event file, and the page
 * that holds them.
 *
 * Two chart shapes serve every figure: horizontal bars on a log axis (one
 * row per benchmark, up to four series a row, a whisker for the min-max
 * spread over the repetitions) and lines over a small numeric x (producers,
 * streams). The timeline has a track per (pid, tid) of the trace, a box per
 * complete event ("ph":"X"), a tick per instant event and an arrow per flow
 * ("s" to "f" with the same id). Everything is written with the XML escapes,
 * so each SVG and the page are well-formed XML. */
#include "bench/report.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <weft/weft.h>

#include "tests/support/json_dom.h" /* the strict little JSON reader the tests use */

/* ---- a growable string ---------------------------------------------------------------------- */

typedef struct sb {
  char *s;
  size_t len, cap;
} sb;

static void sb_need(sb *b, size_t n) {
  if (b->len + n + 1 <= b->cap) return;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < b->len + n + 1) cap *= 2;
  char *s = realloc(b->s, cap);
  if (!s) {
    fputs("weft-bench: out of memory for the report\n", stderr);
    exit(1);
  }
  b->s = s;
  b->cap = cap;
}

static void sb_put(sb *b, const char *s) {
  size_t n = strlen(s);
  sb_need(b, n);
  memcpy(b->s + b->len, s, n + 1);
  b->len += n;
}

static void sb_printf(sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sb *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n <= 0) return;
  sb_need(b, (size_t)n);
  va_start(ap, fmt);
  vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

/* Text as XML character data or attribute value: & < > " escaped; control
 * characters (not allowed in XML 1.0) become spaces. */
static void sb_xml(sb *b, const char *s) {
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    switch (c) {
    case '&':
      sb_put(b, "&amp;");
      break;
    case '<':
      sb_put(b, "&lt;");
      break;
    case '>':
      sb_put(b, "&gt;");
      break;
    case '"':
      sb_put(b, "&quot;");
      break;
    default: {
      char ch[2] = {(char)(c < 0x20 && c != '\n' && c != '\t' ? ' ' : c), 0};
      sb_put(b, ch);
    }
    }
  }
}

/* ---- numbers -------------------------------------------------------------------------------- */

static void fmt_ns(double ns, char *out, size_t cap) {
  if (!(ns > 0))
    snprintf(out, cap, "0");
  else if (ns < 10)
    snprintf(out, cap, "%.2f ns", ns);
  else if (ns < 1e3)
    snprintf(out, cap, "%.0f ns", ns);
  else if (ns < 1e6)
    snprintf(out, cap, "%.3g \xc2\xb5s", ns / 1e3);
  else if (ns < 1e9)
    snprintf(out, cap, "%.3g ms", ns / 1e6);
  else
    snprintf(out, cap, "%.3g s", ns / 1e9);
}

static void fmt_value(double v, bool ratio, char *out, size_t cap) {
  if (ratio)
    snprintf(out, cap, "%.3g\xc3\x97", v); /* "x" as the multiplication sign */
  else
    fmt_ns(v, out, cap);
}

/* ---- results -------------------------------------------------------------------------------- */

typedef struct result {
  const char *name, *baseline, *description;
  double median, min, max; /* ns per operation; NAN when it skipped itself */
} result;

typedef struct results {
  result *v;
  size_t n;
} results;

static double num_or_nan(const jnode *n, const char *key) {
  const jnode *m = jget(n, key);
  return m && m->type == J_NUM ? m->num : NAN;
}

static bool results_load(const jnode *root, results *out) {
  const jnode *rs = jget(root, "results");
  if (!rs || rs->type != J_ARR) return false;
  out->v = calloc(rs->n ? rs->n : 1, sizeof(result));
  if (!out->v) return false;
  out->n = 0;
  for (size_t i = 0; i < rs->n; i++) {
    const jnode *r = rs->items[i];
    const char *name = jget_str(r, "name");
    if (!name) continue;
    out->v[out->n++] = (result){.name = name,
                                .baseline = jget_str(r, "baseline"),
                                .median = num_or_nan(r, "median"),
                                .min = num_or_nan(r, "min"),
                                .max = num_or_nan(r, "max")};
  }
  return true;
}

/* The result named |name| that timed something, or NULL. */
static const result *find(const results *rs, const char *name) {
  for (size_t i = 0; i < rs->n; i++)
    if (!strcmp(rs->v[i].name, name)) return rs->v[i].median > 0 ? &rs->v[i] : NULL;
  return NULL;
}

/* ---- SVG ------------------------------------------------------------------------------------ */

#define SVG_W    960
#define LABEL_W  300
#define RIGHT_W  40
#define ROW_H    14
#define ROW_GAP  8
#define AXIS_TOP 44

static const char *const palette[] = {"#3b6fb6", "#d98c2b", "#5a9e4b", "#9c5ab0",
                                      "#c0504d", "#4bacc6", "#8c6d31", "#7f7f7f"};

typedef struct figure {
  const char *id; /* the file name's stem and the element id */
  char title[160];
  sb svg; /* the <svg> element, no XML declaration */
  sb caption;
} figure;

static void svg_open(sb *b, int w, int h, const char *title) {
  sb_printf(b,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n",
            w, h, w, h);
  sb_put(b, "<title>");
  sb_xml(b, title);
  sb_put(b, "</title>\n<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n");
  sb_printf(b, "<text x=\"%d\" y=\"20\" font-size=\"15\" font-weight=\"bold\">", 10);
  sb_xml(b, title);
  sb_put(b, "</text>\n");
}

static void svg_text(sb *b, double x, double y, const char *anchor, const char *text) {
  sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\">", x, y, anchor);
  sb_xml(b, text);
  sb_put(b, "</text>\n");
}

static void svg_legend(sb *b, const char *const *names, int n, int y) {
  double x = LABEL_W;
  for (int i = 0; i < n; i++) {
    sb_printf(b, "<rect x=\"%.1f\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/>\n", x, y - 10,
              palette[i]);
    svg_text(b, x + 16, y, "start", names[i]);
    x += 24 + 7.0 * (double)strlen(names[i]);
  }
}

/* A log axis over [lo, hi] (both > 0), rounded out to decades. */
typedef struct logaxis {
  double dlo, dhi, x0, w;
} logaxis;

static logaxis axis_for(double lo, double hi, double x0, double w) {
  logaxis a = {floor(log10(lo)), ceil(log10(hi)), x0, w};
  if (a.dhi <= a.dlo) a.dhi = a.dlo + 1;
  return a;
}

static double axis_at(const logaxis *a, double v) {
  double d = v > 0 ? log10(v) : a->dlo;
  if (d < a->dlo) d = a->dlo;
  return a->x0 + (d - a->dlo) / (a->dhi - a->dlo) * a->w;
}

/* Vertical grid lines and labels at each decade (and 2x, 5x when few). */
static void axis_grid(sb *b, const logaxis *a, double top, double bottom, bool ratio) {
  bool minor = a->dhi - a->dlo <= 3;
  for (double d = a->dlo; d <= a->dhi + 1e-9; d++) {
    for (int m = 1; m <= (minor ? 5 : 1); m += (m == 1 ? 1 : 3)) {
      double v = pow(10, d) * m;
      if (log10(v) > a->dhi + 1e-9) break;
      double x = axis_at(a, v);
      sb_printf(b,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                "stroke-width=\"1\"/>\n",
                x, top, x, bottom, m == 1 ? "#c8c8c8" : "#ececec");
      char label[32];
      fmt_value(v, ratio, label, sizeof(label));
      svg_text(b, x, top - 4, "middle", label);
    }
  }
}

/* ---- horizontal bars ------------------------------------------------------------------------ */

#define HB_SERIES 4

typedef struct hb_row {
  char label[96];
  bool have[HB_SERIES];
  double med[HB_SERIES], lo[HB_SERIES], hi[HB_SERIES];
} hb_row;

typedef struct hb_chart {
  hb_row *rows;
  size_t n, cap;
  const char *series[HB_SERIES];
  int nseries;
  bool ratio; /* values are ratios: the axis is marked at 1 */
} hb_chart;

static hb_row *hb_add(hb_chart *c, const char *label) {
  if (c->n == c->cap) {
    size_t cap = c->cap ? c->cap * 2 : 16;
    hb_row *r = realloc(c->rows, cap * sizeof(*r));
    if (!r) {
      fputs("weft-bench: out of memory for the report\n", stderr);
      exit(1);
    }
    c->rows = r;
    c->cap = cap;
  }
  hb_row *r = &c->rows[c->n++];
  memset(r, 0, sizeof(*r));
  snprintf(r->label, sizeof(r->label), "%s", label);
  return r;
}

static void hb_set(hb_row *r, int s, const result *x) {
  if (!x) return;
  r->have[s] = true;
  r->med[s] = x->median;
  r->lo[s] = x->min > 0 ? x->min : x->median;
  r->hi[s] = x->max > 0 ? x->max : x->median;
}

static void hb_set_value(hb_row *r, int s, double med, double lo, double hi) {
  r->have[s] = med > 0;
  r->med[s] = med;
  r->lo[s] = lo > 0 ? lo : med;
  r->hi[s] = hi > 0 ? hi : med;
}

static void no_data(sb *b, const char *title, const char *why) {
  svg_open(b, SVG_W, 70, title);
  svg_text(b, 10, 50, "start", why);
  sb_put(b, "</svg>\n");
}

static void hb_draw(sb *b, const hb_chart *c, const char *title) {
  double lo = INFINITY, hi = 0;
  for (size_t i = 0; i < c->n; i++)
    for (int s = 0; s < c->nseries; s++)
      if (c->rows[i].have[s]) {
        if (c->rows[i].lo[s] < lo) lo = c->rows[i].lo[s];
        if (c->rows[i].hi[s] > hi) hi = c->rows[i].hi[s];
      }
  if (!(hi > 0)) {
    no_data(b, title, "No benchmark of this figure ran (see --filter and --quick).");
    return;
  }
  if (c->ratio) { /* the reference line at 1 stays on the axis */
    if (lo > 1) lo = 1;
    if (hi < 1) hi = 1;
  }
  double row_h = ROW_H * c->nseries + ROW_GAP;
  double top = AXIS_TOP + 24, height = top + row_h * (double)c->n + 16;
  svg_open(b, SVG_W, (int)height, title);
  svg_legend(b, c->series, c->nseries, 38);
  logaxis a = axis_for(lo, hi, LABEL_W, SVG_W - LABEL_W - RIGHT_W);
  axis_grid(b, &a, top, height - 10, c->ratio);
  if (c->ratio) {
    double x = axis_at(&a, 1);
    sb_printf(b,
              "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444444\" "
              "stroke-dasharray=\"4 3\"/>\n",
              x, top, x, height - 10);
  }
  for (size_t i = 0; i < c->n; i++) {
    const hb_row *r = &c->rows[i];
    double y = top + row_h * (double)i;
    svg_text(b, LABEL_W - 6, y + ROW_H * c->nseries / 2.0 + 4, "end", r->label);
    for (int s = 0; s < c->nseries; s++) {
      if (!r->have[s]) continue;
      double y0 = y + ROW_H * s + 1, h = ROW_H - 3, x1 = axis_at(&a, r->med[s]);
      char v[32], lo_s[32], hi_s[32];
      fmt_value(r->med[s], c->ratio, v, sizeof(v));
      fmt_value(r->lo[s], c->ratio, lo_s, sizeof(lo_s));
      fmt_value(r->hi[s], c->ratio, hi_s, sizeof(hi_s));
      sb_printf(b,
                "<rect x=\"%d\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\">"
                "<title>",
                LABEL_W, y0, x1 - LABEL_W > 0.5 ? x1 - LABEL_W : 0.5, h, palette[s]);
      sb_xml(b, r->label);
      sb_put(b, ", ");
      sb_xml(b, c->series[s]);
      sb_printf(b, ": median %s (min %s, max %s)</title></rect>\n", v, lo_s, hi_s);
      double wl = axis_at(&a, r->lo[s]), wh = axis_at(&a, r->hi[s]), ym = y0 + h / 2;
      sb_printf(b,
                "<path d=\"M%.1f %.1fH%.1fM%.1f %.1fV%.1fM%.1f %.1fV%.1f\" stroke=\"#222222\" "
                "fill=\"none\"/>\n",
                wl, ym, wh, wl, y0 + 2, y0 + h - 2, wh, y0 + 2, y0 + h - 2);
      svg_text(b, (wh > x1 ? wh : x1) + 4, y0 + h - 2, "start", v);
    }
  }
  sb_put(b, "</svg>\n");
}

/* ---- lines ---------------------------------------------------------------------------------- */

#define LN_POINTS 8

typedef struct ln_series {
  const char *name;
  int n;
  double x[LN_POINTS], med[LN_POINTS], lo[LN_POINTS], hi[LN_POINTS];
} ln_series;

static void ln_add(ln_series *s, double x, const result *r) {
  if (!r || s->n == LN_POINTS) return;
  s->x[s->n] = x;
  s->med[s->n] = r->median;
  s->lo[s->n] = r->min > 0 ? r->min : r->median;
  s->hi[s->n] = r->max > 0 ? r->max : r->median;
  s->n++;
}

static void ln_draw(sb *b, const ln_series *ss, int ns, const char *title, const char *xname) {
  double lo = INFINITY, hi = 0, xs[LN_POINTS * 8];
  int nx = 0;
  for (int i = 0; i < ns; i++)
    for (int k = 0; k < ss[i].n; k++) {
      if (ss[i].lo[k] < lo) lo = ss[i].lo[k];
      if (ss[i].hi[k] > hi) hi = ss[i].hi[k];
      bool seen = false;
      for (int j = 0; j < nx; j++) seen |= xs[j] == ss[i].x[k];
      if (!seen) xs[nx++] = ss[i].x[k];
    }
  if (!(hi > 0)) {
    no_data(b, title, "No benchmark of this figure ran (see --filter and --quick).");
    return;
  }
  for (int i = 1; i < nx; i++) /* a few points: insertion sort */
    for (int j = i; j > 0 && xs[j - 1] > xs[j]; j--) {
      double t = xs[j];
      xs[j] = xs[j - 1];
      xs[j - 1] = t;
    }
  int h = 380, left = 90, top = AXIS_TOP + 20, bottom = h - 50;
  svg_open(b, SVG_W, h, title);
  const char *names[8];
  for (int i = 0; i < ns && i < 8; i++) names[i] = ss[i].name;
  svg_legend(b, names, ns < 8 ? ns : 8, 38);
  /* The y axis is logarithmic, drawn with the same helper turned upright. */
  logaxis a = axis_for(lo, hi, 0, bottom - top);
  for (double d = a.dlo; d <= a.dhi + 1e-9; d++) {
    double y = bottom - axis_at(&a, pow(10, d));
    char label[32];
    fmt_ns(pow(10, d), label, sizeof(label));
    sb_printf(b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#c8c8c8\"/>\n", left,
              y, SVG_W - RIGHT_W, y);
    svg_text(b, left - 6, y + 4, "end", label);
  }
  double span = SVG_W - RIGHT_W - left - 80;
  for (int j = 0; j < nx; j++) {
    double x = left + 40 + (nx > 1 ? span * j / (nx - 1) : span / 2);
    char label[32];
    snprintf(label, sizeof(label), "%g", xs[j]);
    svg_text(b, x, bottom + 18, "middle", label);
  }
  svg_text(b, (left + SVG_W - RIGHT_W) / 2.0, bottom + 38, "middle", xname);
  for (int i = 0; i < ns; i++) {
    const ln_series *s = &ss[i];
    const char *color = palette[i % 8];
    sb_printf(b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", color);
    double px[LN_POINTS], py[LN_POINTS];
    for (int k = 0; k < s->n; k++) {
      int j = 0;
      while (j < nx && xs[j] != s->x[k]) j++;
      px[k] = left + 40 + (nx > 1 ? span * j / (nx - 1) : span / 2);
      py[k] = bottom - axis_at(&a, s->med[k]);
      sb_printf(b, "%s%.1f,%.1f", k ? " " : "", px[k], py[k]);
    }
    sb_put(b, "\"/>\n");
    for (int k = 0; k < s->n; k++) {
      char v[32];
      fmt_ns(s->med[k], v, sizeof(v));
      double yl = bottom - axis_at(&a, s->lo[k]), yh = bottom - axis_at(&a, s->hi[k]);
      sb_printf(b, "<path d=\"M%.1f %.1fV%.1f\" stroke=\"%s\"/>\n", px[k], yl, yh, color);
      sb_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"><title>", px[k], py[k],
                color);
      sb_xml(b, s->name);
      sb_printf(b, " at %g: %s</title></circle>\n", s->x[k], v);
    }
  }
  sb_put(b, "</svg>\n");
}

/* ---- the figures ---------------------------------------------------------------------------- */

static void fig_init(figure *f, const char *id, const char *title) {
  memset(f, 0, sizeof(*f));
  f->id = id;
  snprintf(f->title, sizeof(f->title), "%s", title);
}

static void fig_baselines(figure *f, const results *rs) {
  fig_init(f, "baselines", "Every benchmark against its baseline (ns per operation)");
  hb_chart c = {.series = {"weft", "baseline"}, .nseries = 2};
  for (size_t i = 0; i < rs->n; i++) {
    const result *r = &rs->v[i];
    if (!r->baseline || !(r->median > 0)) continue;
    hb_row *row = hb_add(&c, r->name);
    hb_set(row, 0, r);
    hb_set(row, 1, find(rs, r->baseline));
  }
  hb_draw(&f->svg, &c, f->title);
  sb_put(&f->caption, "Median nanoseconds per operation of each benchmark that names a baseline, "
                      "beside the baseline's, on a log axis; the whiskers span the fastest and "
                      "slowest repetition. The baseline of each row is the one its JSON entry "
                      "names (a naive mutex+condvar queue, mallocx/dallocx, memcpy, ...).");
  free(c.rows);
}

static void fig_producers(figure *f, const results *rs) {
  fig_init(f, "producers", "Scaling with producers (ns per launch)");
  ln_series s[4] = {{.name = "weft: W4 submit"},
                    {.name = "naive queue: W4 submit"},
                    {.name = "weft: no-op launch"},
                    {.name = "naive queue: no-op task"}};
  ln_add(&s[0], 1, find(rs, "sched_w4_submit_1producer"));
  ln_add(&s[0], 2, find(rs, "sched_w4_submit_2producers"));
  ln_add(&s[0], 4, find(rs, "sched_w4_submit_4producers"));
  ln_add(&s[1], 1, find(rs, "baseline_w4_submit_1producer"));
  ln_add(&s[1], 2, find(rs, "baseline_w4_submit_2producers"));
  ln_add(&s[1], 4, find(rs, "baseline_w4_submit_4producers"));
  ln_add(&s[2], 1, find(rs, "launch_noop_1stream"));
  ln_add(&s[2], 4, find(rs, "launch_noop_4producers"));
  ln_add(&s[3], 1, find(rs, "baseline_mutex_condvar_1stream"));
  ln_add(&s[3], 4, find(rs, "baseline_mutex_condvar_4producers"));
  ln_draw(&f->svg, s, 4, f->title, "client threads (producers), each on its own stream");
  sb_put(&f->caption, "Median ns per launch as client threads are added (W4: time inside "
                      "weft_launch alone; no-op: submit to completion), against the naive queue "
                      "doing the same; the vertical strokes are the min-max spread.");
}

static void fig_streams(figure *f, const results *rs) {
  fig_init(f, "streams", "Scaling with streams (ns per launch)");
  ln_series s[5] = {{.name = "weft_launch"},
                    {.name = "task graph"},
                    {.name = "replay"},
                    {.name = "W1 (1 stream) / W2 (4 streams)"},
                    {.name = "naive queue W1 / W2"}};
  ln_add(&s[0], 1, find(rs, "launches_chain"));
  ln_add(&s[0], 4, find(rs, "launches_wide"));
  ln_add(&s[1], 1, find(rs, "graph_chain"));
  ln_add(&s[1], 4, find(rs, "graph_wide"));
  ln_add(&s[2], 1, find(rs, "replay_chain"));
  ln_add(&s[2], 4, find(rs, "replay_wide"));
  ln_add(&s[3], 1, find(rs, "sched_w1_chain"));
  ln_add(&s[3], 4, find(rs, "sched_w2_independent"));
  ln_add(&s[4], 1, find(rs, "baseline_w1_chain"));
  ln_add(&s[4], 4, find(rs, "baseline_w2_independent"));
  ln_draw(&f->svg, s, 5, f->title, "streams the work is spread over");
  sb_put(&f->caption, "The same work on one stream (a dependent chain) and spread over four "
                      "(independent chains): as launches, as one task-graph submission, as one "
                      "replay of a capture, and the scheduler workloads W1 and W2.");
}

static void fig_replay(figure *f, const results *rs) {
  fig_init(f, "replay", "Replay against launches (ns per node)");
  static const char *const shapes[][4] = {
      {"64-node chain, to completion", "launches_chain", "graph_chain", "replay_chain"},
      {"64-node chain, submission only", "launches_chain_submit", "graph_chain_submit",
       "replay_chain_submit"},
      {"16 x 4-node chains on 4 streams", "launches_wide", "graph_wide", "replay_wide"},
      {"CUDA: 64-node chain", "cuda_eager_chain", NULL, "cuda_replay_chain"}};
  hb_chart c = {.series = {"weft_launch calls", "task graph", "replay"}, .nseries = 3};
  for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
    const result *l = find(rs, shapes[i][1]), *g = shapes[i][2] ? find(rs, shapes[i][2]) : NULL,
                 *p = find(rs, shapes[i][3]);
    if (!l && !g && !p) continue;
    hb_row *row = hb_add(&c, shapes[i][0]);
    hb_set(row, 0, l);
    hb_set(row, 1, g);
    hb_set(row, 2, p);
  }
  hb_draw(&f->svg, &c, f->title);
  sb_put(&f->caption, "The same nodes issued as weft_launch calls, as one weft_taskgraph_submit "
                      "and as one weft_capture_replay, per node.");
  free(c.rows);
}

static void fig_memory(figure *f, const results *rs) {
  fig_init(f, "memory", "Memory benchmarks against mallocx/dallocx and memcpy (ratio)");
  hb_chart c = {.series = {"weft / baseline (median of the run)"}, .nseries = 1, .ratio = true};
  for (size_t i = 0; i < rs->n; i++) {
    const result *r = &rs->v[i];
    if (strncmp(r->name, "mem_", 4) != 0 || !r->baseline || !(r->median > 0)) continue;
    const result *b = find(rs, r->baseline);
    if (!b) continue;
    hb_row *row = hb_add(&c, r->name);
    /* The spread of a ratio: its fastest over the baseline's slowest and back. */
    hb_set_value(row, 0, r->median / b->median, r->min / b->max, r->max / b->min);
    char label[96];
    snprintf(label, sizeof(label), "%s / %s", r->name + 4, b->name + 4);
    snprintf(row->label, sizeof(row->label), "%s", label);
  }
  hb_draw(&f->svg, &c, f->title);
  sb_put(&f->caption, "Median time of each memory benchmark over its baseline's (mallocx/dallocx "
                      "on a private jemalloc arena, or memcpy for relocation): below the dashed "
                      "line at 1 weft is faster. Whiskers: the fastest run over the baseline's "
                      "slowest, the slowest over its fastest.");
  free(c.rows);
}

static void fig_failures(figure *f, const results *rs) {
  fig_init(f, "failures", "The failure storm and skipped launches (ns per launch)");
  static const char *const names[][2] = {
      {"failure storm: 1% fail, 3 skipped each", "failure_storm"},
      {"the same launches, none failing", "failure_storm_0pct"},
      {"4 bindings, in a write scope", "launch_4bindings_success"},
      {"4 bindings, skipped (input failed)", "launch_4bindings_skip"},
      {"4 bindings, no write scope", "launch_4bindings_noscope"},
      {"no binding", "launch_0bindings"}};
  hb_chart c = {.series = {"weft"}, .nseries = 1};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    const result *r = find(rs, names[i][1]);
    if (r) hb_set(hb_add(&c, names[i][0]), 0, r);
  }
  hb_draw(&f->svg, &c, f->title);
  sb_put(&f->caption, "What failures cost: 4 threads where 1% of launches fail and each failure "
                      "skips 3 dependents, against the same launches without failures; and one "
                      "launch that runs in a write scope against one skipped because its input "
                      "carries a failure.");
  free(c.rows);
}

/* ---- the timeline --------------------------------------------------------------------------- */

#define TL_MAX_TRACKS 64
#define TL_MAX_EVENTS 4000
#define TL_TRACK_H    22

typedef struct tl_track {
  double pid, tid;
  char name[64];
} tl_track;

typedef struct tl_flow {
  const char *id;
  double ts_s, ts_f;
  int track_s, track_f;
} tl_flow;

static int track_of(tl_track *t, int *n, double pid, double tid) {
  for (int i = 0; i < *n; i++)
    if (t[i].pid == pid && t[i].tid == tid) return i;
  if (*n == TL_MAX_TRACKS) return -1;
  t[*n] = (tl_track){.pid = pid, .tid = tid};
  snprintf(t[*n].name, sizeof(t[*n].name), "pid %g / tid %g", pid, tid);
  return (*n)++;
}

static const char *arg_str(const jnode *e, const char *key) {
  return jget_str(jget(e, "args"), key);
}

static uint32_t hash_name(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

/* The flow id as text (numbers and strings are both used). */
static void flow_id(const jnode *e, char *out, size_t cap) {
  const jnode *id = jget(e, "id");
  if (!id) id = jget(e, "bind_id");
  if (id && id->type == J_STR)
    snprintf(out, cap, "s:%s", id->str);
  else if (id && id->type == J_NUM)
    snprintf(out, cap, "n:%.17g", id->num);
  else
    out[0] = '\0';
}

/* Draws |events| (the traceEvents array); false with |why| when it is not one. */
static bool draw_timeline(sb *b, const jnode *root, const char *title, char *why, size_t cap) {
  const jnode *ev = root && root->type == J_ARR ? root : jget(root, "traceEvents");
  if (!ev || ev->type != J_ARR) {
    snprintf(why, cap, "no \"traceEvents\" array");
    return false;
  }
  tl_track tracks[TL_MAX_TRACKS];
  int ntracks = 0;
  double t0 = INFINITY, t1 = -INFINITY;
  size_t complete = 0;
  /* Pass 1: tracks (named by thread_name metadata) and the time range. */
  for (size_t i = 0; i < ev->n; i++) {
    const jnode *e = ev->items[i];
    const char *ph = jget_str(e, "ph");
    double pid = num_or_nan(e, "pid"), tid = num_or_nan(e, "tid"), ts = num_or_nan(e, "ts");
    if (!ph || isnan(pid)) continue;
    if (isnan(tid)) tid = 0;
    if (!strcmp(ph, "M")) {
      const char *n = jget_str(e, "name"), *v = arg_str(e, "name");
      if (n && v && !strcmp(n, "thread_name")) {
        int k = track_of(tracks, &ntracks, pid, tid);
        if (k >= 0) snprintf(tracks[k].name, sizeof(tracks[k].name), "%s", v);
      }
      continue;
    }
    if (isnan(ts)) continue;
    double dur = !strcmp(ph, "X") ? num_or_nan(e, "dur") : 0;
    if (isnan(dur) || dur < 0) dur = 0;
    if (!strcmp(ph, "X") || !strcmp(ph, "i") || !strcmp(ph, "I")) {
      if (track_of(tracks, &ntracks, pid, tid) < 0) continue;
      complete += !strcmp(ph, "X");
      if (ts < t0) t0 = ts;
      if (ts + dur > t1) t1 = ts + dur;
    }
  }
  if (!complete) {
    snprintf(why, cap, "no complete (\"ph\":\"X\") event");
    return false;
  }
  if (t1 <= t0) t1 = t0 + 1;
  int left = 170, top = AXIS_TOP + 26;
  int h = top + ntracks * TL_TRACK_H + 40;
  double w = SVG_W - left - RIGHT_W;
#define TX(t) (left + ((t)-t0) / (t1 - t0) * w)
  svg_open(b, SVG_W, h, title);
  const char *legend[] = {"ran (colour by name)", "failed", "skipped"};
  double lx = left;
  const char *lc[] = {palette[0], "#c8102e", "#a8a8a8"};
  for (int i = 0; i < 3; i++) {
    sb_printf(b, "<rect x=\"%.1f\" y=\"28\" width=\"12\" height=\"12\" fill=\"%s\"/>\n", lx, lc[i]);
    svg_text(b, lx + 16, 38, "start", legend[i]);
    lx += 30 + 7.0 * (double)strlen(legend[i]);
  }
  /* Axis: about 8 ticks at round microsecond steps. */
  double step = pow(10, floor(log10((t1 - t0) / 8)));
  if ((t1 - t0) / step > 16)
    step *= 5;
  else if ((t1 - t0) / step > 8)
    step *= 2;
  for (double t = ceil(t0 / step) * step; t <= t1 + 1e-9; t += step) {
    double x = TX(t);
    char label[32];
    fmt_ns((t - t0) * 1e3, label, sizeof(label));
    sb_printf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#e0e0e0\"/>\n", x,
              top - 6, x, h - 30);
    svg_text(b, x, top - 10, "middle", label);
  }
  for (int k = 0; k < ntracks; k++) {
    double y = top + k * TL_TRACK_H;
    sb_printf(b, "<rect x=\"%d\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>\n", left, y,
              w, TL_TRACK_H, k % 2 ? "#f7f7f7" : "#ffffff");
    svg_text(b, left - 6, y + 15, "end", tracks[k].name);
  }
  /* Pass 2: the events, then the flows over them. */
  size_t drawn = 0, left_out = 0;
  tl_flow *flows = calloc(ev->n ? ev->n : 1, sizeof(*flows));
  size_t nflows = 0;
  for (size_t i = 0; i < ev->n; i++) {
    const jnode *e = ev->items[i];
    const char *ph = jget_str(e, "ph");
    double pid = num_or_nan(e, "pid"), tid = num_or_nan(e, "tid"), ts = num_or_nan(e, "ts");
    if (!ph || isnan(pid) || isnan(ts)) continue;
    if (isnan(tid)) tid = 0;
    int k = track_of(tracks, &ntracks, pid, tid);
    if (k < 0 || k >= ntracks) continue;
    double y = top + k * TL_TRACK_H;
    const char *name = jget_str(e, "name");
    if (!name) name = "(unnamed)";
    if (!strcmp(ph, "X")) {
      if (drawn == TL_MAX_EVENTS) {
        left_out++;
        continue;
      }
      drawn++;
      double dur = num_or_nan(e, "dur");
      if (isnan(dur) || dur < 0) dur = 0;
      const char *outcome = arg_str(e, "outcome");
      const char *fill = outcome && !strcmp(outcome, "failed")    ? "#c8102e"
                         : outcome && !strcmp(outcome, "skipped") ? "#a8a8a8"
                                                                  : palette[hash_name(name) % 4];
      double x = TX(ts), wd = TX(ts + dur) - x;
      sb_printf(b,
                "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%d\" fill=\"%s\" "
                "stroke=\"#333333\" stroke-width=\"0.3\"><title>",
                x, y + 3, wd > 0.8 ? wd : 0.8, TL_TRACK_H - 6, fill);
      char d[32];
      fmt_ns(dur * 1e3, d, sizeof(d));
      sb_xml(b, name);
      sb_printf(b, " (%s", d);
      if (outcome) {
        sb_put(b, ", ");
        sb_xml(b, outcome);
      }
      sb_put(b, ")</title></rect>\n");
    } else if (!strcmp(ph, "i") || !strcmp(ph, "I")) {
      double x = TX(ts);
      sb_printf(b, "<path d=\"M%.2f %.1fl4 6l-4 6l-4 -6z\" fill=\"#222222\"><title>", x, y + 5);
      sb_xml(b, name);
      sb_put(b, "</title></path>\n");
    } else if (!strcmp(ph, "s") || !strcmp(ph, "f")) {
      char id[64];
      flow_id(e, id, sizeof(id));
      if (!id[0]) continue;
      tl_flow *fl = NULL;
      for (size_t j = 0; j < nflows && !fl; j++)
        if (!strcmp(flows[j].id, id) &&
            (ph[0] == 's' ? flows[j].track_s < 0 : flows[j].track_f < 0))
          fl = &flows[j];
      if (!fl) {
        fl = &flows[nflows++];
        *fl = (tl_flow){.id = NULL, .track_s = -1, .track_f = -1};
        fl->id = strdup(id);
        if (!fl->id) {
          nflows--;
          continue;
        }
      }
      if (ph[0] == 's') {
        fl->track_s = k;
        fl->ts_s = ts;
      } else {
        fl->track_f = k;
        fl->ts_f = ts;
      }
    }
  }
  sb_put(b, "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" "
            "markerWidth=\"6\" markerHeight=\"6\" orient=\"auto\"><path d=\"M0 0L10 5L0 10z\" "
            "fill=\"#444444\"/></marker></defs>\n");
  size_t paired = 0;
  for (size_t j = 0; j < nflows; j++) {
    if (flows[j].track_s >= 0 && flows[j].track_f >= 0) {
      paired++;
      double ys = top + flows[j].track_s * TL_TRACK_H + TL_TRACK_H / 2.0;
      double yf = top + flows[j].track_f * TL_TRACK_H + TL_TRACK_H / 2.0;
      sb_printf(b,
                "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#444444\" "
                "stroke-width=\"1\" marker-end=\"url(#arrow)\"/>\n",
                TX(flows[j].ts_s), ys, TX(flows[j].ts_f), yf);
    }
    free((void *)flows[j].id);
  }
  free(flows);
  char foot[160];
  snprintf(foot, sizeof(foot), "%zu events on %d tracks, %zu flows%s", drawn, ntracks, paired,
           left_out ? " (more events than drawn: the first ones are shown)" : "");
  svg_text(b, left, h - 10, "start", foot);
  sb_put(b, "</svg>\n");
#undef TX
  return true;
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  sb b = {0};
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) {
    sb_need(&b, n);
    memcpy(b.s + b.len, buf, n);
    b.len += n;
    b.s[b.len] = '\0';
  }
  bool bad = ferror(f);
  fclose(f);
  if (bad || !b.s) {
    free(b.s);
    return NULL;
  }
  return b.s;
}

/* ---- the page ------------------------------------------------------------------------------- */

static bool write_text(const char *dir, const char *name, const char *head, const sb *body) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "weft-bench: cannot write %s: %s\n", path, strerror(errno));
    return false;
  }
  fputs(head, f);
  fwrite(body->s ? body->s : "", 1, body->len, f);
  if (fclose(f) != 0) {
    fprintf(stderr, "weft-bench: writing %s failed: %s\n", path, strerror(errno));
    return false;
  }
  return true;
}

bool wb_report_prepare(const char *dir) {
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
    fprintf(stderr, "weft-bench: --report: cannot create the directory '%s': %s\n", dir,
            strerror(errno));
    return false;
  }
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    fprintf(stderr, "weft-bench: --report: '%s' is not a directory\n", dir);
    return false;
  }
  char path[4096];
  snprintf(path, sizeof(path), "%s/index.html", dir);
  FILE *f = fopen(path, "a");
  if (!f) {
    fprintf(stderr, "weft-bench: --report: cannot write in '%s': %s\n", dir, strerror(errno));
    return false;
  }
  fclose(f);
  return true;
}

static const char page_style[] =
    "body{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222;}"
    "figure{margin:1.5em 0;}figcaption{color:#555;font-size:0.9em;max-width:960px;}"
    "pre{background:#f6f6f6;padding:1em;overflow:auto;max-height:40em;font-size:0.8em;}"
    "table{border-collapse:collapse;}td,th{padding:2px 8px;text-align:left;}";

int wb_report_write(const char *dir, const char *results_json, const char *trace_path,
                    const char *trace_title) {
  jnode *root = jparse(results_json);
  results rs = {0};
  if (!root || !results_load(root, &rs)) {
    fputs("weft-bench: --report: the results are not the JSON document weft-bench writes\n",
          stderr);
    jfree(root);
    return 1;
  }
  int rc = 0;
  enum { NFIG = 7 };
  figure figs[NFIG];
  int nf = 0;
  fig_baselines(&figs[nf++], &rs);
  fig_producers(&figs[nf++], &rs);
  fig_streams(&figs[nf++], &rs);
  fig_replay(&figs[nf++], &rs);
  fig_memory(&figs[nf++], &rs);
  fig_failures(&figs[nf++], &rs);
  if (trace_path) {
    figure *f = &figs[nf];
    fig_init(f, "timeline", trace_title ? trace_title : "Timeline");
    char *text = read_file(trace_path);
    jnode *trace = text ? jparse(text) : NULL;
    char why[128] = "";
    if (!text)
      snprintf(why, sizeof(why), "cannot read it: %s", strerror(errno));
    else if (!trace)
      snprintf(why, sizeof(why), "it is not JSON");
    if (trace && draw_timeline(&f->svg, trace, f->title, why, sizeof(why))) {
      sb_put(&f->caption, "A track per stream and thread of the trace (");
      sb_xml(&f->caption, trace_path);
      sb_put(&f->caption,
             "): a box per launch, copy or call, coloured by its name, red when it failed, grey "
             "when it was skipped; arrows from a task to the one that waited for it or was "
             "skipped because of it. Hover a box for its name and duration; open the file in "
             "Perfetto (ui.perfetto.dev) for everything else.");
      nf++;
    } else {
      fprintf(stderr, "weft-bench: --report: the trace '%s' is not drawn: %s\n", trace_path, why);
      free(f->svg.s);
      free(f->caption.s);
      rc = 1;
    }
    jfree(trace);
    free(text);
  }

  sb page = {0};
  sb_put(&page, "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n"
                "<head>\n<meta charset=\"utf-8\"/>\n<title>weft-bench report</title>\n<style>");
  sb_put(&page, page_style);
  sb_put(&page, "</style>\n</head>\n<body>\n<h1>weft-bench report</h1>\n<table>\n");
  const jnode *host = jget(root, "host"), *cfg = jget(root, "config");
  const char *rows[][2] = {
      {"weft", jget_str(root, "weft_version")}, {"when", jget_str(root, "timestamp")},
      {"host", jget_str(host, "hostname")},     {"machine", jget_str(host, "machine")},
      {"compiler", jget_str(host, "compiler")}, {"allocator", jget_str(host, "allocator")}};
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    sb_put(&page, "<tr><th>");
    sb_xml(&page, rows[i][0]);
    sb_put(&page, "</th><td>");
    sb_xml(&page, rows[i][1] ? rows[i][1] : "");
    sb_put(&page, "</td></tr>\n");
  }
  sb_printf(&page,
            "<tr><th>run</th><td>%zu benchmarks, %g repetitions (+%g warm-up), scale %g%s, "
            "%g CPUs</td></tr>\n</table>\n",
            rs.n, num_or_nan(cfg, "reps"), num_or_nan(cfg, "warmup"), num_or_nan(cfg, "scale"),
            jget(cfg, "quick") && jget(cfg, "quick")->b ? ", quick" : "", num_or_nan(host, "cpus"));
  sb_put(&page, "<p>Absolute times on a shared machine are noise; the ratio to a baseline "
                "measured in the same run is the figure of merit (docs/benchmarks.md).</p>\n");
  for (int i = 0; i < nf; i++) {
    char name[64];
    snprintf(name, sizeof(name), "%s.svg", figs[i].id);
    if (!write_text(dir, name, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", &figs[i].svg))
      rc = 1;
    sb_printf(&page, "<h2 id=\"%s\">", figs[i].id);
    sb_xml(&page, figs[i].title);
    sb_put(&page, "</h2>\n<figure>\n");
    sb_put(&page, figs[i].svg.s);
    sb_put(&page, "<figcaption>");
    sb_put(&page, figs[i].caption.s ? figs[i].caption.s : "");
    sb_printf(&page, " (<a href=\"%s\">%s</a>)</figcaption>\n</figure>\n", name, name);
  }
  bool drew_timeline = nf > 0 && !strcmp(figs[nf - 1].id, "timeline");
  if (!drew_timeline) { /* a timeline.svg of an earlier report would be stale now */
    char stale[4096];
    snprintf(stale, sizeof(stale), "%s/timeline.svg", dir);
    remove(stale);
  }
  if (!trace_path)
    sb_put(&page, "<h2 id=\"timeline\">Timeline</h2>\n<p>No timeline: this weft-bench was built "
                  "without the trace API (weft_trace_begin); <code>--report-trace FILE</code> "
                  "draws one recorded elsewhere.</p>\n");
  sb_put(&page, "<h2 id=\"json\">The results (JSON)</h2>\n<details><summary>The document "
                "weft-bench --json writes for this run</summary>\n<pre id=\"results-json\">");
  sb_xml(&page, results_json);
  sb_put(&page, "</pre>\n</details>\n</body>\n</html>\n");
  if (!write_text(dir, "index.html", "", &page)) rc = 1;
  free(page.s);
  for (int i = 0; i < nf; i++) {
    free(figs[i].svg.s);
    free(figs[i].caption.s);
  }
  free(rs.v);
  jfree(root);
  return rc;
}

/* ---- the timeline's workload ---------------------------------------------------------------- */

#ifdef WEFT_BENCH_HAVE_TRACE
bool wb_report_can_trace(void) {
  return true;
}

static weft_status tl_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  uint64_t *out = ctx->buffers[ctx->num_buffers - 1];
  out[0] += 1;
  return NULL;
}

static bool traced(weft_status st, const char *what) {
  if (!st) return true;
  char text[512];
  weft_error_format(st, text, sizeof(text));
  fprintf(stderr, "weft-bench: --report: the timeline's workload: %s: %s\n", what, text);
  weft_error_free(st);
  return false;
}

bool wb_report_record_trace(const char *path) {
  weft_device_options o;
  weft_device_options_init(&o);
  o.max_streams = 4;
  o.failpoints = "launch#11=Generic"; /* one failure: its skipped dependents show */
  weft_device *dev = NULL;
  if (!traced(weft_device_open(&o, &dev), "weft_device_open")) return false;
  bool ok = traced(weft_trace_begin(dev, 0), "weft_trace_begin");
  weft_kernel k = {0};
  enum { WIDTH = 4, LAYERS = 6 };
  weft_buffer bufs[2][WIDTH];
  ok = ok && traced(weft_kernel_host(dev, "layer", tl_kernel, NULL, &k), "weft_kernel_host");
  for (int s = 0; s < 2 && ok; s++)
    for (int j = 0; j < WIDTH && ok; j++)
      ok = traced(weft_buffer_create(dev, (weft_stream_id)j, 64, &bufs[s][j]), "create");
  /* Layer L: launch j reads buffers j and j+1 of the previous layer, on
   * another stream than either, and writes its own. */
  const uint32_t g[3] = {1, 1, 1};
  for (int l = 0; l < LAYERS && ok; l++)
    for (int j = 0; j < WIDTH && ok; j++) {
      weft_binding bd[3] = {{bufs[l % 2][j], 0, WEFT_WHOLE, WEFT_READ},
                            {bufs[l % 2][(j + 1) % WIDTH], 0, WEFT_WHOLE, WEFT_READ},
                            {bufs[(l + 1) % 2][j], 0, WEFT_WHOLE, WEFT_WRITE}};
      ok = traced(weft_launch(dev, (weft_stream_id)((j + l) % WIDTH), k, g, g, bd, 3, NULL, 0),
                  "weft_launch");
    }
  for (int j = 0; j < WIDTH && ok; j++) ok = traced(weft_sync(dev, (weft_stream_id)j), "weft_sync");
  ok = traced(weft_trace_end(dev, path), "weft_trace_end") && ok;
  weft_device_close(dev);
  return ok;
}
#else
bool wb_report_can_trace(void) {
  return false;
}

bool wb_report_record_trace(const char *path) {
  (void)path;
  fputs("weft-bench: --report: this build has no weft_trace_begin (the timeline needs it; "
        "--report-trace FILE draws a trace recorded elsewhere)\n",
        stderr);
  return false;
}
#endif
