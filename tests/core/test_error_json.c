/* JSON form of errors: the exact shape written, round trips for every kind
 * and nesting, string escapes both ways, and a strict parser that answers
 * every malformed document with InvalidArgument and leaves *out NULL. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/weft.h>

#include "core/error.h"

#if defined(__SANITIZE_ADDRESS__)
#define HAVE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HAVE_ASAN 1
#endif
#endif

#ifdef HAVE_ASAN
#include <sanitizer/lsan_interface.h>
/* Criterion counts a test that leaks as passed: ask LSan directly. */
#define ASSERT_NO_LEAKS() cr_assert_eq(__lsan_do_recoverable_leak_check(), 0, "leak reported above")
#else
#define ASSERT_NO_LEAKS() ((void)0)
#endif

#define FOR_EACH_KIND(k)                                                                           \
  for (weft_error_kind k = WEFT_ERR_BUFFER_TOO_BIG; (int)k < WEFT_ERROR_KIND_COUNT;                \
       k = (weft_error_kind)(k + 1))

static char *json(weft_status st) {
  char *j = weft_error_to_json(st);
  cr_assert_not_null(j);
  return j;
}

static char *fmt(weft_status st) {
  size_t n = weft_error_format(st, NULL, 0);
  char *s = malloc(n + 1);
  cr_assert_not_null(s);
  weft_error_format(st, s, n + 1);
  return s;
}

static void assert_json_eq(weft_status st, const char *want) {
  char *got = json(st);
  cr_assert_str_eq(got, want);
  weft_free(got);
}

/* to_json(from_json(to_json(e))) == to_json(e), the parsed error formats the
 * same, and it carries no backtrace. */
static void assert_round_trip(weft_status st) {
  char *a = json(st);
  weft_status back = (weft_status)1;
  weft_status err = weft_error_from_json(a, &back);
  cr_assert_null(err, "%s: %s", a, weft_error_message(err));
  char *b = json(back);
  cr_assert_str_eq(a, b);
  cr_assert_eq(weft_error_kind_of(back), weft_error_kind_of(st));
  cr_assert_eq(weft_error_backtrace_depth(back), 0);
  char *fa = fmt(st), *fb = fmt(back);
  cr_assert_str_eq(fa, fb);
  free(fa);
  free(fb);
  weft_free(a);
  weft_free(b);
  weft_error_free(back);
}

/* from_json(doc) must fail with InvalidArgument naming an offset, *out NULL. */
static void assert_rejected(const char *doc) {
  weft_status out = (weft_status)1;
  weft_status err = weft_error_from_json(doc, &out);
  cr_assert_not_null(err, "accepted: %s", doc);
  cr_assert_eq(weft_error_kind_of(err), WEFT_ERR_INVALID_ARGUMENT, "%s", doc);
  cr_assert_null(out, "*out must stay NULL: %s", doc);
  cr_assert_not_null(strstr(weft_error_message(err), "at offset"), "%s -> %s", doc,
                     weft_error_message(err));
  weft_error_free(err);
}

static weft_status parse_ok(const char *doc) {
  weft_status out = NULL;
  weft_status err = weft_error_from_json(doc, &out);
  cr_assert_null(err, "%s: %s", doc, weft_error_message(err));
  return out;
}

static weft_status make_full(weft_error_kind k) {
  switch (k) {
  case WEFT_ERR_STORAGE_MAPPING_FAILED:
    return weft_error_wrap(k, 8192, weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, 8192, "driver"),
                           "dry-run page %d", 3);
  case WEFT_ERR_UNWRITTEN: {
    const char *chain[] = {"skipped k2: it needed memory 5", "skipped k1: it needed memory 3"};
    return weft_error_unwritten(7, 2, weft_error_make(WEFT_ERR_DEVICE_POISONED, "illegal address"),
                                chain, 2);
  }
  case WEFT_ERR_SEVERAL: {
    weft_status items[] = {weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, 64, "pool"),
                           weft_error_make(WEFT_ERR_NOT_FOUND, "stale handle")};
    return weft_error_several(items, 2);
  }
  default:
    return weft_error_make_sized(k, 1000 + (uint64_t)k, "message of %s", weft_error_kind_name(k));
  }
}

/* ---- the shape written -------------------------------------------------------------------- */

Test(error_json, null_status_is_null) {
  char *j = json(NULL);
  cr_assert_str_eq(j, "null");
  weft_free(j);
  weft_status out = (weft_status)1;
  cr_assert_null(weft_error_from_json("null", &out));
  cr_assert_null(out);
  cr_assert_null(weft_error_from_json(" \t\r\nnull\n ", &out));
  cr_assert_null(out);
}

Test(error_json, objects_hold_the_kind_and_only_the_fields_it_has) {
  weft_status st = weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, 4096, "pool %d", 2);
  assert_json_eq(st, "{\"kind\":\"OutOfMemory\",\"size\":4096,\"message\":\"pool 2\"}");
  weft_error_free(st);

  st = weft_error_make_sized(WEFT_ERR_BUFFER_TOO_BIG, 0, NULL);
  assert_json_eq(st, "{\"kind\":\"BufferTooBig\",\"size\":0}");
  weft_error_free(st);

  st = weft_error_make(WEFT_ERR_UNSUPPORTED_STRIDES, NULL);
  assert_json_eq(st, "{\"kind\":\"UnsupportedStrides\"}");
  weft_error_free(st);

  st = weft_error_make(WEFT_ERR_GENERIC, "%s", "");
  assert_json_eq(st, "{\"kind\":\"Generic\",\"message\":\"\"}");
  weft_error_free(st);

  assert_json_eq(weft__error_torn_down(), "{\"kind\":\"TornDown\"}");
  assert_json_eq(weft__error_skipped(), "{\"kind\":\"Skipped\"}");
  assert_json_eq(weft__error_static(WEFT_ERR_PAGE_SIZES_EXHAUSTED),
                 "{\"kind\":\"PageSizesExhausted\",\"size\":0}");
  ASSERT_NO_LEAKS();
}

Test(error_json, source_errors_chain_and_root_are_nested) {
  weft_status st = weft_error_wrap(WEFT_ERR_STORAGE_MAPPING_FAILED, 8,
                                   weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, 8, NULL), "m");
  assert_json_eq(st, "{\"kind\":\"StorageMappingFailed\",\"size\":8,\"message\":\"m\",\"source\":"
                     "{\"kind\":\"OutOfMemory\",\"size\":8}}");
  weft_error_free(st);

  const char *chain[] = {"a", "b"};
  st = weft_error_unwritten(7, 2, weft_error_make(WEFT_ERR_DEVICE_POISONED, "illegal address"),
                            chain, 2);
  assert_json_eq(st, "{\"kind\":\"Unwritten\",\"failure_id\":7,\"claimed\":2,\"chain\":[\"a\","
                     "\"b\"],\"root\":{\"kind\":\"DevicePoisoned\",\"message\":\"illegal "
                     "address\"}}");
  weft_error_free(st);

  st = weft_error_unwritten(UINT64_MAX, UINT32_MAX, NULL, NULL, 0);
  assert_json_eq(st, "{\"kind\":\"Unwritten\",\"failure_id\":18446744073709551615,\"claimed\":"
                     "4294967295,\"chain\":[],\"root\":null}");
  weft_error_free(st);

  st = weft_error_several(NULL, 0);
  assert_json_eq(st, "{\"kind\":\"Several\",\"errors\":[]}");
  weft_error_free(st);

  weft_status items[] = {weft__error_skipped(), weft_error_make(WEFT_ERR_VALIDATION, NULL)};
  st = weft_error_several(items, 2);
  assert_json_eq(st, "{\"kind\":\"Several\",\"errors\":[{\"kind\":\"Skipped\"},{\"kind\":"
                     "\"Validation\"}]}");
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_json, strings_are_escaped) {
  weft_status st = weft_error_make(WEFT_ERR_UNKNOWN, "q\"b\\n\nt\tr\rb\bf\fc\x01\x1f/\xc3\xa9");
  assert_json_eq(st, "{\"kind\":\"Unknown\",\"message\":\"q\\\"b\\\\n\\nt\\tr\\rb\\bf\\fc\\u0001"
                     "\\u001f/\xc3\xa9\"}");
  assert_round_trip(st);
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

/* ---- round trips -------------------------------------------------------------------------- */

Test(error_json, every_kind_round_trips) {
  FOR_EACH_KIND(k) {
    weft_status st = make_full(k);
    assert_round_trip(st);
    weft_error_free(st);
    weft_status plain = weft_error_make(k, NULL);
    assert_round_trip(plain);
    weft_error_free(plain);
    assert_round_trip(weft__error_static(k));
  }
  ASSERT_NO_LEAKS();
}

Test(error_json, nested_errors_round_trip) {
  /* Several[Unwritten{root: DevicePoisoned{source: Unknown}},
   *         Unwritten{root: StorageMappingFailed{source: OutOfMemory}},
   *         Several[TornDown, LaunchCompilation], Skipped] */
  const char *chain[] = {"skipped \"k3\": it needed memory 9", "skipped k2\n(line two)"};
  weft_status poisoned = weft_error_wrap(WEFT_ERR_DEVICE_POISONED, 0,
                                         weft_error_make(WEFT_ERR_UNKNOWN, "xid 79"), "sticky");
  weft_status smf =
      weft_error_wrap(WEFT_ERR_STORAGE_MAPPING_FAILED, 1u << 20,
                      weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, 1u << 20, NULL), "dry run");
  weft_status inner[] = {weft__error_torn_down(),
                         weft_error_make(WEFT_ERR_LAUNCH_COMPILATION, "ptx")};
  weft_status items[] = {weft_error_unwritten(1, 3, poisoned, chain, 2),
                         weft_error_unwritten(2, 1, smf, NULL, 0), weft_error_several(inner, 2),
                         weft__error_skipped()};
  weft_status st = weft_error_several(items, 4);
  assert_round_trip(st);

  weft_status back = NULL;
  char *j = json(st);
  cr_assert_null(weft_error_from_json(j, &back));
  weft_free(j);
  cr_assert_eq(weft_error_count(back), 4);
  weft_status u = weft_error_at(back, 0);
  cr_assert_eq(weft_error_failure_id(u), 1);
  cr_assert_eq(weft_error_claimed(u), 3);
  cr_assert_str_eq(weft_error_chain_at(u, 0), chain[0]);
  cr_assert_str_eq(weft_error_chain_at(u, 1), chain[1]);
  cr_assert_eq(weft_error_kind_of(weft_error_source(weft_error_root(u))), WEFT_ERR_UNKNOWN);
  cr_assert(weft_error_is_device_poisoned(back));
  cr_assert_eq(weft_error_size(weft_error_root(weft_error_at(back, 1))), 1u << 20);
  cr_assert_eq(weft_error_at(weft_error_at(back, 2), 0), weft__error_torn_down(),
               "parsed payload-free kinds are the singletons");
  cr_assert_eq(weft_error_at(back, 3), weft__error_skipped());
  weft_error_free(back);
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_json, an_unwritten_origin_is_written_and_parsed_back) {
  const char *chain[] = {"skipped kernel 'b' (launch 4): it needed buffer #2"};
  weft_status st = weft__error_unwritten(3, 1, weft_error_make(WEFT_ERR_GENERIC, "root"), chain, 1,
                                         "kernel 'a' (launch 3)");
  assert_json_eq(st, "{\"kind\":\"Unwritten\",\"failure_id\":3,\"claimed\":1,\"chain\":[\"skipped "
                     "kernel 'b' (launch 4): it needed buffer #2\"],\"origin\":\"kernel 'a' "
                     "(launch 3)\",\"root\":{\"kind\":\"Generic\",\"message\":\"root\"}}");
  assert_round_trip(st);
  char *j = json(st);
  weft_status back = NULL;
  cr_assert_null(weft_error_from_json(j, &back));
  cr_assert_str_eq(weft_error_origin(back), "kernel 'a' (launch 3)");
  cr_assert_eq(weft_error_chain_length(back), 1);
  weft_free(j);
  weft_error_free(back);
  weft_error_free(st);
  /* Without an origin the member is absent, and it is refused on other kinds. */
  st = weft_error_unwritten(3, 1, NULL, NULL, 0);
  assert_json_eq(st, "{\"kind\":\"Unwritten\",\"failure_id\":3,\"claimed\":1,\"chain\":[],"
                     "\"root\":null}");
  weft_error_free(st);
  weft_status err =
      weft_error_from_json("{\"kind\":\"Generic\",\"origin\":\"kernel 'a' (launch 3)\"}", &back);
  cr_assert_eq(weft_error_kind_of(err), WEFT_ERR_INVALID_ARGUMENT);
  cr_assert_null(back);
  weft_error_free(err);
  ASSERT_NO_LEAKS();
}

Test(error_json, an_annotated_error_round_trips_with_both_texts_in_its_message) {
  weft_status cause = weft_error_make(WEFT_ERR_NOT_FOUND, "stale");
  weft_status st = weft_error_wrap(WEFT_ERR_OUT_OF_MEMORY, 64, cause, "pool");
  st = weft_error_annotate(st, "memory snapshot: %d pages", 2);
  assert_json_eq(st, "{\"kind\":\"OutOfMemory\",\"size\":64,\"message\":\"pool; memory "
                     "snapshot: 2 pages\",\"source\":{\"kind\":\"NotFound\",\"message\":"
                     "\"stale\"}}");
  assert_round_trip(st);
  weft_status back = parse_ok("{\"kind\":\"Generic\",\"message\":\"parsed\"}");
  back = weft_error_annotate(back, "annotated after parsing");
  assert_json_eq(back, "{\"kind\":\"Generic\",\"message\":\"parsed; annotated after parsing\"}");
  weft_error_free(back);
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_json, a_cause_chain_up_to_the_depth_limit_round_trips) {
  weft_status st = weft_error_make(WEFT_ERR_UNKNOWN, "bottom");
  for (int i = 1; i < WEFT__ERROR_JSON_MAX_DEPTH; i++)
    st = weft_error_wrap(WEFT_ERR_GENERIC, 0, st, "level %d", i);
  assert_round_trip(st); /* exactly WEFT__ERROR_JSON_MAX_DEPTH objects deep */
  st = weft_error_wrap(WEFT_ERR_GENERIC, 0, st, "one too many");
  cr_assert_null(weft_error_to_json(st), "the writer refuses what the parser would");
  weft_error_free(st);
  /* The limit counts arrays as the parser does: an Unwritten's chain array
   * (or a Several's items) one level below its object. */
  weft_status u = weft_error_unwritten(1, 1, NULL, NULL, 0);
  for (int i = 1; i < WEFT__ERROR_JSON_MAX_DEPTH - 1; i++)
    u = weft_error_wrap(WEFT_ERR_GENERIC, 0, u, "level %d", i);
  assert_round_trip(u); /* the chain array at exactly the limit */
  u = weft_error_wrap(WEFT_ERR_GENERIC, 0, u, "one too many");
  cr_assert_null(weft_error_to_json(u));
  weft_error_free(u);
  ASSERT_NO_LEAKS();
}

Test(error_json, message_presence_survives_the_round_trip) {
  weft_status none = weft_error_make(WEFT_ERR_VALIDATION, NULL);
  weft_status empty = weft_error_make(WEFT_ERR_VALIDATION, "%s", "");
  char *a = json(none), *b = json(empty);
  weft_status pa = parse_ok(a), pb = parse_ok(b);
  cr_assert_null(weft__error_message_raw(pa));
  cr_assert_str_eq(weft__error_message_raw(pb), "");
  weft_free(a);
  weft_free(b);
  weft_error_free(pa);
  weft_error_free(pb);
  weft_error_free(none);
  weft_error_free(empty);
  ASSERT_NO_LEAKS();
}

Test(error_json, bytes_above_ascii_pass_through_unchanged) {
  /* Valid UTF-8 (é, 😀) and bytes that are not UTF-8 at all. */
  weft_status st = weft_error_make(WEFT_ERR_GENERIC, "\xc3\xa9 \xf0\x9f\x98\x80 \xff\xfe\x80");
  assert_round_trip(st);
  char *j = json(st);
  weft_status back = parse_ok(j);
  cr_assert_str_eq(weft_error_message(back), weft_error_message(st));
  weft_free(j);
  weft_error_free(back);
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

/* ---- what the parser accepts -------------------------------------------------------------- */

Test(error_json, accepts_whitespace_and_members_in_any_order) {
  weft_status st =
      parse_ok(" {\n\t\"message\" : \"x\" ,\r\n \"size\":12, \"kind\":\"OutOfMemory\"}\n");
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_OUT_OF_MEMORY);
  cr_assert_eq(weft_error_size(st), 12);
  cr_assert_str_eq(weft_error_message(st), "x");
  weft_error_free(st);

  st = parse_ok(
      "{\"root\":null,\"chain\":[ ],\"claimed\":0,\"failure_id\":0,\"kind\":\"Unwritten\"}");
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_UNWRITTEN);
  cr_assert_null(weft_error_root(st));
  weft_error_free(st);

  st = parse_ok("{\"kind\":\"Generic\",\"source\":null}");
  cr_assert_null(weft_error_source(st));
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_json, decodes_every_escape_to_utf8) {
  weft_status st = parse_ok("{\"kind\":\"Generic\",\"message\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t"
                            "\\u0041\\u00e9\\u20AC\\ud83d\\ude00\\u001F\"}");
  cr_assert_str_eq(weft_error_message(st),
                   "\"\\/\b\f\n\r\tA\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\x1f");
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_json, parsed_torn_down_and_skipped_are_the_singletons) {
  weft_status st = parse_ok("{\"kind\":\"TornDown\"}");
  cr_assert_eq(st, weft__error_torn_down());
  st = parse_ok("{\"kind\":\"Skipped\"}");
  cr_assert_eq(st, weft__error_skipped());
}

/* ---- what it rejects ---------------------------------------------------------------------- */

Test(error_json, null_arguments_are_invalid) {
  weft_status out = (weft_status)1;
  weft_status err = weft_error_from_json(NULL, &out);
  cr_assert_eq(weft_error_kind_of(err), WEFT_ERR_INVALID_ARGUMENT);
  cr_assert_null(out);
  weft_error_free(err);
  err = weft_error_from_json("null", NULL);
  cr_assert_eq(weft_error_kind_of(err), WEFT_ERR_INVALID_ARGUMENT);
  weft_error_free(err);
  ASSERT_NO_LEAKS();
}

Test(error_json, malformed_documents_are_invalid_arguments) {
  static const char *const bad[] = {
      /* not an error document */
      "",
      "   ",
      "{",
      "}",
      "[]",
      "true",
      "false",
      "nul",
      "nullx",
      "42",
      "\"Generic\"",
      "{}",
      "null null",
      /* the kind */
      "{\"kind\":\"NoSuchKind\"}",
      "{\"kind\":\"Ok\"}",
      "{\"kind\":\"Invalid\"}",
      "{\"kind\":\"outOfMemory\",\"size\":1}",
      "{\"kind\":42}",
      "{\"kind\":null}",
      "{\"size\":1}",
      "{\"kind\":\"Generic\",\"kind\":\"Generic\"}",
      /* numbers */
      "{\"kind\":\"OutOfMemory\"}",
      "{\"kind\":\"OutOfMemory\",\"size\":\"4096\"}",
      "{\"kind\":\"OutOfMemory\",\"size\":-1}",
      "{\"kind\":\"OutOfMemory\",\"size\":1.5}",
      "{\"kind\":\"OutOfMemory\",\"size\":1e3}",
      "{\"kind\":\"OutOfMemory\",\"size\":01}",
      "{\"kind\":\"OutOfMemory\",\"size\":18446744073709551616}",
      "{\"kind\":\"OutOfMemory\",\"size\":99999999999999999999999}",
      "{\"kind\":\"OutOfMemory\",\"size\":null}",
      "{\"kind\":\"OutOfMemory\",\"size\":+1}",
      /* fields the kind does not have, or of the wrong type */
      "{\"kind\":\"NotFound\",\"size\":1}",
      "{\"kind\":\"TornDown\",\"message\":\"x\"}",
      "{\"kind\":\"Skipped\",\"source\":null}",
      "{\"kind\":\"Generic\",\"message\":null}",
      "{\"kind\":\"Generic\",\"message\":5}",
      "{\"kind\":\"Generic\",\"bogus\":1}",
      "{\"kind\":\"Generic\",\"source\":5}",
      "{\"kind\":\"Generic\",\"source\":{}}",
      "{\"kind\":\"Generic\",\"source\":\"Unknown\"}",
      "{\"kind\":\"Generic\",\"errors\":[]}",
      "{\"kind\":\"Generic\",\"chain\":[]}",
      /* Several */
      "{\"kind\":\"Several\"}",
      "{\"kind\":\"Several\",\"errors\":{}}",
      "{\"kind\":\"Several\",\"errors\":[null]}",
      "{\"kind\":\"Several\",\"errors\":[1]}",
      "{\"kind\":\"Several\",\"errors\":[{\"kind\":\"Generic\"},]}",
      "{\"kind\":\"Several\",\"errors\":[,]}",
      "{\"kind\":\"Several\",\"errors\":[{}]}",
      "{\"kind\":\"Several\",\"errors\":[{\"kind\":\"Generic\"}{\"kind\":\"Generic\"}]}",
      /* Unwritten */
      "{\"kind\":\"Unwritten\",\"failure_id\":1,\"claimed\":1,\"chain\":[]}",
      "{\"kind\":\"Unwritten\",\"failure_id\":1,\"claimed\":1,\"root\":null}",
      "{\"kind\":\"Unwritten\",\"failure_id\":1,\"chain\":[],\"root\":null}",
      "{\"kind\":\"Unwritten\",\"claimed\":1,\"chain\":[],\"root\":null}",
      "{\"kind\":\"Unwritten\",\"failure_id\":1,\"claimed\":4294967296,\"chain\":[],\"root\":null}",
      "{\"kind\":\"Unwritten\",\"failure_id\":-1,\"claimed\":1,\"chain\":[],\"root\":null}",
      "{\"kind\":\"Unwritten\",\"failure_id\":1,\"claimed\":1,\"chain\":[1],\"root\":null}",
      "{\"kind\":\"Unwritten\",\"failure_id\":1,\"claimed\":1,\"chain\":\"a\",\"root\":null}",
      "{\"kind\":\"Unwritten\",\"failure_id\":1,\"claimed\":1,\"chain\":[null],\"root\":null}",
      "{\"kind\":\"Unwritten\",\"failure_id\":1,\"claimed\":1,\"chain\":[],\"root\":5}",
      "{\"kind\":\"Unwritten\",\"failure_id\":1,\"claimed\":1,\"chain\":[\"a\" \"b\"]}",
      /* strings */
      "{\"kind\":\"Generic\",\"message\":\"abc}",
      "{\"kind\":\"Generic\",\"message\":\"a\nb\"}",
      "{\"kind\":\"Generic\",\"message\":\"a\tb\"}",
      "{\"kind\":\"Generic\",\"message\":\"\\x\"}",
      "{\"kind\":\"Generic\",\"message\":\"\\u12\"}",
      "{\"kind\":\"Generic\",\"message\":\"\\u12G4\"}",
      "{\"kind\":\"Generic\",\"message\":\"\\u0000\"}",
      "{\"kind\":\"Generic\",\"message\":\"\\ud83d\"}",
      "{\"kind\":\"Generic\",\"message\":\"\\ude00\"}",
      "{\"kind\":\"Generic\",\"message\":\"\\ud83d\\u0041\"}",
      "{\"kind\":\"Generic\",\"message\":\"\\ud83dx\"}",
      "{\"kind\":\"Generic\",\"message\":\"\\",
      "{\"kind\":\"Generic\",\"message\":'x'}",
      /* syntax */
      "{\"kind\":\"Generic\",}",
      "{\"kind\" \"Generic\"}",
      "{kind:\"Generic\"}",
      "{'kind':'Generic'}",
      "{\"kind\":\"Generic\"",
      "{\"kind\":\"Generic\"}}",
      "{\"kind\":\"Generic\"}x",
      "{\"kind\":\"Generic\"} {}",
      "{\"kind\":\"Generic\"}\n,",
      "{,\"kind\":\"Generic\"}",
      "{\"kind\":\"Generic\";\"message\":\"x\"}",
      "{\"kind\":\"Generic\"\"message\":\"x\"}",
      "[{\"kind\":\"Generic\"}]",
      "{\"kind\":\"Generic\",\"source\":null,\"source\":null}",
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) assert_rejected(bad[i]);
  cr_assert_geq(sizeof(bad) / sizeof(bad[0]), 20);
  ASSERT_NO_LEAKS();
}

Test(error_json, the_error_says_where) {
  weft_status out = NULL;
  weft_status err = weft_error_from_json("{\"kind\":\"Generic\"}x", &out);
  cr_assert_str_eq(weft_error_message(err),
                   "weft_error_from_json: at offset 18: trailing bytes after the document");
  weft_error_free(err);
  err = weft_error_from_json("{\"kind\":\"Nope\"}", &out);
  cr_assert_str_eq(weft_error_message(err),
                   "weft_error_from_json: at offset 8: \"kind\" names no error kind");
  weft_error_free(err);
  err = weft_error_from_json("{\"kind\":\"Generic\",\"size\":3}", &out);
  cr_assert_str_eq(weft_error_message(err),
                   "weft_error_from_json: at offset 0: member not allowed for this kind");
  weft_error_free(err);
  ASSERT_NO_LEAKS();
}

Test(error_json, every_truncated_prefix_of_a_valid_document_is_rejected) {
  const char *chain[] = {"hop \"one\"\n", "hop \\two\\"};
  weft_status src = weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, 4096, "tab\there \xc3\xa9");
  weft_status smf = weft_error_wrap(WEFT_ERR_STORAGE_MAPPING_FAILED, 4096, src, "ctl\x01");
  weft_status items[] = {weft_error_unwritten(42, 3, smf, chain, 2), weft__error_skipped(),
                         weft_error_several(NULL, 0)};
  weft_status st = weft_error_several(items, 3);
  char *doc = json(st);
  size_t n = strlen(doc);
  char *prefix = malloc(n + 1);
  for (size_t len = 0; len < n; len++) {
    memcpy(prefix, doc, len);
    prefix[len] = '\0';
    assert_rejected(prefix);
  }
  free(prefix);
  weft_free(doc);
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

Test(error_json, nesting_beyond_the_limit_is_rejected_without_deep_recursion) {
  /* 100000 nested sources: rejected at the limit, long before the stack. */
  const char *open = "{\"kind\":\"Generic\",\"source\":";
  size_t levels = 100000, n = strlen(open);
  char *doc = malloc(levels * (n + 1) + 8);
  char *at = doc;
  for (size_t i = 0; i < levels; i++, at += n) memcpy(at, open, n);
  memcpy(at, "null", 4);
  at += 4;
  memset(at, '}', levels);
  at[levels] = '\0';
  assert_rejected(doc);
  free(doc);

  /* Deep arrays inside "errors". */
  char arrays[300];
  snprintf(arrays, sizeof(arrays), "{\"kind\":\"Several\",\"errors\":");
  size_t len = strlen(arrays);
  memset(arrays + len, '[', 200);
  arrays[len + 200] = '\0';
  assert_rejected(arrays);
  ASSERT_NO_LEAKS();
}

Test(error_json, byte_mutations_never_crash_and_what_parses_round_trips) {
  weft_status st = make_full(WEFT_ERR_SEVERAL);
  const char *chain[] = {"h\"1"};
  weft_status items[] = {
      st, weft_error_unwritten(5, 1, make_full(WEFT_ERR_STORAGE_MAPPING_FAILED), chain, 1)};
  st = weft_error_several(items, 2);
  char *doc = json(st);
  size_t n = strlen(doc);
  static const char subst[] = "\"{}[],:0 9x\\-nu";
  char *m = malloc(n + 1);
  size_t parsed = 0;
  for (size_t i = 0; i < n; i++) {
    for (size_t s = 0; s < sizeof(subst) - 1; s++) {
      memcpy(m, doc, n + 1);
      m[i] = subst[s];
      weft_status out = NULL;
      weft_status err = weft_error_from_json(m, &out);
      if (err) {
        cr_assert_eq(weft_error_kind_of(err), WEFT_ERR_INVALID_ARGUMENT, "%s", m);
        cr_assert_null(out);
        weft_error_free(err);
        continue;
      }
      parsed++;
      char *again = json(out);
      weft_status twice = parse_ok(again);
      char *third = json(twice);
      cr_assert_str_eq(again, third);
      weft_free(again);
      weft_free(third);
      weft_error_free(twice);
      weft_error_free(out);
    }
  }
  cr_assert_gt(parsed, 0, "some mutations (digits, message bytes) still parse");
  free(m);
  weft_free(doc);
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}

/* Timeout (the bounded wait's kind, after Several) is written and parsed by
 * its name like every other kind. */
Test(error_json, a_timeout_round_trips_by_its_name) {
  weft_status st = weft_error_make(WEFT_ERR_TIMEOUT, "waited 5 ns");
  assert_json_eq(st, "{\"kind\":\"Timeout\",\"message\":\"waited 5 ns\"}");
  weft_status back = parse_ok("{\"kind\":\"Timeout\",\"message\":\"waited 5 ns\"}");
  cr_assert_eq(weft_error_kind_of(back), WEFT_ERR_TIMEOUT);
  cr_assert_str_eq(weft_error_message(back), "waited 5 ns");
  weft_error_free(back);
  weft_error_free(st);
  ASSERT_NO_LEAKS();
}
