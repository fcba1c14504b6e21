/* Hostile files (issue 17, items 6 and 7): tables of malformed SafeTensors files and tokenizer
 * files built in memory and written to a temporary folder. Each must be refused with NX_ERR_IO,
 * a message naming the function and the problem, a NULL handle and no handle left alive; the
 * valid edge cases beside them (empty headers, zero-size tensors, escapes, non-ASCII names,
 * surrogate pairs) must still open. The SafeTensors rules are the safetensors crate's
 * (docs/hostile_files.md). */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nx_test.h"

/* ---------------------------------------------------------------- SafeTensors */
typedef struct {
  const char* what;       /* the case, printed on failure */
  const char* header;     /* JSON header text; NULL: the file is raw[0..raw_len) */
  size_t header_len;      /* 0: strlen(header) (set it for headers holding a NUL byte) */
  int lie;                /* 1: the 8-byte prefix says declared_len instead of the real length */
  uint64_t declared_len;
  size_t data_len;        /* zero bytes after the header */
  nx_status want;         /* NX_ERR_IO, or NX_OK for a valid edge case */
  const char* needle;     /* a failure's message contains it; for NX_OK, a tensor name to fetch (or NULL) */
  size_t count;           /* for NX_OK: the number of tensors */
  const char* raw;
  size_t raw_len;
} st_case;

/* One entry object: E("F32", "2", "0", "8") */
#define E(dt, shape, b, e) "{\"dtype\":\"" dt "\",\"shape\":[" shape "],\"data_offsets\":[" b "," e "]}"
#define A8 "\"a\":" E("F32", "2", "0", "8")
/* "ünïcødé 名前 🙂" (literals split so no hex escape runs into the next letter) */
#define UNICODE_NAME "\xc3\xbc" "n" "\xc3\xaf" "c" "\xc3\xb8" "d" "\xc3\xa9 \xe5\x90\x8d\xe5\x89\x8d \xf0\x9f\x99\x82"

#define BAD(what, header, data, needle) {what, header, 0, 0, 0, data, NX_ERR_IO, needle, 0, NULL, 0}
#define BAD_LEN(what, header, declared, data, needle) {what, header, 0, 1, declared, data, NX_ERR_IO, needle, 0, NULL, 0}
#define BAD_RAW(what, raw, n, needle) {what, NULL, 0, 0, 0, 0, NX_ERR_IO, needle, 0, raw, n}
#define OK(what, header, data, count, fetch) {what, header, 0, 0, 0, data, NX_OK, fetch, count, NULL, 0}

static const st_case k_st_cases[] = {
    /* ---- the 8-byte length prefix */
    BAD_RAW("empty file", "", 0, "0 bytes"),
    BAD_RAW("7-byte file", "\x02\0\0\0\0\0\0", 7, "7 bytes"),
    BAD_LEN("header length past the file", "{" A8 "}", 1000, 8, "header length 1000 runs past the end"),
    BAD_LEN("header length 2^64-1", "{" A8 "}", UINT64_MAX, 8, "exceeds the limit of 100000000"),
    BAD_LEN("header length 2^63", "{" A8 "}", (uint64_t)1 << 63, 8, "exceeds"),
    BAD_LEN("header length 100000001", "{" A8 "}", 100000001, 8, "exceeds"),
    BAD_LEN("header length 0", "{}", 0, 0, "does not start with '{'"),
    BAD_LEN("header length cuts the JSON", "{" A8 "}", 20, 8, "malformed JSON"),
    BAD_LEN("header length takes a data byte", "{}", 3, 1, "malformed JSON"),
    /* ---- the header is not a JSON object */
    BAD("header is an array", "[1,2]", 0, "does not start with '{'"),
    BAD("header is a string", "\"{}\"", 0, "does not start with '{'"),
    BAD("leading space", " {}", 0, "does not start with '{'"),
    BAD("byte order mark", "\xef\xbb\xbf{}", 0, "does not start with '{'"),
    BAD("trailing text", "{} x", 0, "trailing characters"),
    BAD("two objects", "{}{}", 0, "trailing characters"),
    BAD("unterminated object", "{" A8, 8, "malformed JSON"),
    BAD("trailing comma", "{" A8 ",}", 8, "expected a string"),
    BAD("single quotes", "{'a':1}", 0, "expected a string"),
    BAD("comment", "{/* c */}", 0, "expected a string"),
    BAD("missing value", "{\"a\":}", 0, "unexpected character '}'"),
    /* ---- entries */
    BAD("entry is a number", "{\"a\":1}", 0, "entry \"a\" is not an object"),
    BAD("entry is empty", "{\"a\":{}}", 0, "needs dtype"),
    BAD("dtype is a number", "{\"a\":{\"dtype\":7,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "needs dtype (string)"),
    BAD("dtype is null", "{\"a\":{\"dtype\":null,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "needs dtype"),
    BAD("dtype unknown", "{\"a\":" E("Q4", "2", "0", "8") "}", 8, "unsupported dtype \"Q4\""),
    BAD("dtype lowercase", "{\"a\":" E("f32", "2", "0", "8") "}", 8, "unsupported dtype \"f32\""),
    BAD("dtype the engine lacks", "{\"a\":" E("U8", "8", "0", "8") "}", 8, "unsupported dtype \"U8\""),
    BAD("unknown field", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8, "unknown field \"x\""),
    BAD("duplicate field", "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "duplicate key \"dtype\""),
    BAD("three offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,8]}}", 8, "data_offsets"),
    BAD("offsets not an array", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":8}}", 8, "data_offsets"),
    BAD("shape not an array", "{\"a\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8, "shape (array)"),
    BAD("duplicate names", "{" A8 "," A8 "}", 8, "duplicate key \"a\""),
    BAD("duplicate non-ASCII names", "{\"\xc3\xa9\":" E("F32", "2", "0", "8") ",\"\\u00e9\":" E("F32", "2", "8", "16") "}",
        16, "duplicate key"),
    /* ---- metadata */
    BAD("__metadata__ is an array", "{\"__metadata__\":[\"x\"]}", 0, "__metadata__ is not an object"),
    BAD("__metadata__ is a string", "{\"__metadata__\":\"x\"}", 0, "__metadata__ is not an object"),
    BAD("metadata value a number", "{\"__metadata__\":{\"n\":3}}", 0, "metadata value of \"n\" is not a string"),
    BAD("metadata value null", "{\"__metadata__\":{\"n\":null}}", 0, "is not a string"),
    BAD("metadata value an object", "{\"__metadata__\":{\"n\":{}}}", 0, "is not a string"),
    BAD("__metadata__ twice", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, "duplicate key \"__metadata__\""),
    BAD("metadata key twice", "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, "duplicate key \"k\""),
    /* ---- shapes: overflow, signs, non-integers */
    BAD("byte count wraps: [2^31, 2^31] f32 at [0, 0]", "{\"a\":" E("F32", "2147483648,2147483648", "0", "0") "}", 0,
        "overflow"),
    BAD("element count wraps: [2^32, 2^32] i64", "{\"a\":" E("I64", "4294967296,4294967296", "0", "0") "}", 0, "overflow"),
    BAD("overflow before a zero dim", "{\"a\":" E("F32", "1099511627776,1099511627776,0", "0", "0") "}", 0, "overflow"),
    BAD("product past int64: [2^32, 2^31] f32", "{\"a\":" E("F32", "4294967296,2147483648", "0", "0") "}", 0, "overflow"),
    BAD("product past int64: [2^32, 2^31] bool", "{\"a\":" E("BOOL", "4294967296,2147483648", "0", "8") "}", 8,
        "needs 9223372036854775808"),
    BAD("dim 2^63 with a zero", "{\"a\":" E("F32", "9223372036854775808,0", "0", "0") "}", 0, "more than a shape holds"),
    BAD("dim 2^64-1", "{\"a\":" E("BOOL", "18446744073709551615", "0", "0") "}", 0, "more than a shape holds"),
    BAD("dim 2^64", "{\"a\":" E("F32", "18446744073709551616", "0", "0") "}", 0, "not a non-negative integer"),
    BAD("dim 99999999999999999999", "{\"a\":" E("F32", "99999999999999999999", "0", "0") "}", 0,
        "not a non-negative integer"),
    BAD("dim 1e400", "{\"a\":" E("F32", "1e400", "0", "0") "}", 0, "out of range"),
    BAD("dim -1e400", "{\"a\":" E("F32", "-1e400", "0", "0") "}", 0, "out of range"),
    BAD("dim 1e3", "{\"a\":" E("F32", "1e3", "0", "4000") "}", 4000, "not a non-negative integer"),
    BAD("dim 2.0", "{\"a\":" E("F32", "2.0", "0", "8") "}", 8, "not a non-negative integer"),
    BAD("dim 1e-400", "{\"a\":" E("F32", "1e-400", "0", "0") "}", 0, "not a non-negative integer"),
    BAD("negative dim", "{\"a\":" E("F32", "-2", "0", "8") "}", 8, "not a non-negative integer"),
    BAD("dim -0", "{\"a\":" E("F32", "-0,2", "0", "0") "}", 0, "not a non-negative integer"),
    BAD("dim +2", "{\"a\":" E("F32", "+2", "0", "8") "}", 8, "unexpected character '+'"),
    BAD("dim 02", "{\"a\":" E("F32", "02", "0", "8") "}", 8, "leading zero"),
    BAD("dim 00", "{\"a\":" E("F32", "00", "0", "0") "}", 0, "leading zero"),
    BAD("dim 2.", "{\"a\":" E("F32", "2.", "0", "8") "}", 8, "digit after '.'"),
    BAD("dim .5", "{\"a\":" E("F32", ".5", "0", "8") "}", 8, "unexpected character '.'"),
    BAD("dim 1e", "{\"a\":" E("F32", "1e", "0", "4") "}", 4, "exponent"),
    BAD("dim -", "{\"a\":" E("F32", "-", "0", "4") "}", 4, "digit after '-'"),
    BAD("dim 0x10", "{\"a\":" E("F32", "0x10", "0", "64") "}", 64, "expected ',' or ']'"),
    BAD("dim a string", "{\"a\":" E("F32", "\"2\"", "0", "8") "}", 8, "not a non-negative integer"),
    BAD("dim true", "{\"a\":" E("F32", "true", "0", "4") "}", 4, "not a non-negative integer"),
    BAD("dim null", "{\"a\":" E("F32", "null", "0", "4") "}", 4, "not a non-negative integer"),
    BAD("dim NaN", "{\"a\":" E("F32", "NaN", "0", "4") "}", 4, "unexpected character 'N'"),
    BAD("dim Infinity", "{\"a\":" E("F32", "Infinity", "0", "4") "}", 4, "unexpected character 'I'"),
    BAD("nested shape", "{\"a\":" E("F32", "[2]", "0", "8") "}", 8, "not a non-negative integer"),
    BAD("shape size mismatch", "{\"a\":" E("F32", "3", "0", "8") "}", 8, "needs 12"),
    BAD("scalar with 8 bytes", "{\"a\":" E("F32", "", "0", "8") "}", 8, "needs 4"),
    /* ---- offsets */
    BAD("begin after end", "{\"a\":" E("F32", "0", "8", "0") "}", 8, "begin 8 after end 0"),
    BAD("end past the data", "{\"a\":" E("F32", "4", "0", "16") "}", 8, "past the 8-byte data section"),
    BAD("end 2^64-1", "{\"a\":" E("BOOL", "1", "0", "18446744073709551615") "}", 8, "past the 8-byte data section"),
    BAD("end 2^64", "{\"a\":" E("F32", "2", "0", "18446744073709551616") "}", 8, "data_offsets"),
    BAD("negative begin", "{\"a\":" E("F32", "2", "-8", "0") "}", 8, "data_offsets"),
    BAD("float end", "{\"a\":" E("F32", "2", "0", "8.0") "}", 8, "data_offsets"),
    BAD("string offsets", "{\"a\":" E("F32", "2", "\"0\"", "\"8\"") "}", 8, "data_offsets"),
    BAD("gap between tensors", "{" A8 ",\"b\":" E("F32", "2", "12", "20") "}", 20, "hole in the data section"),
    BAD("gap at the start", "{\"a\":" E("F32", "2", "4", "12") "}", 12, "hole in the data section"),
    BAD("overlap", "{" A8 ",\"b\":" E("F32", "2", "4", "12") "}", 12, "overlaps"),
    BAD("same bytes twice", "{" A8 ",\"b\":" E("I32", "2", "0", "8") "}", 8, "overlaps"),
    BAD("zero-size inside another", "{" A8 ",\"z\":" E("F32", "0", "4", "4") "}", 8, "overlaps"),
    BAD("zero-size past the end", "{" A8 ",\"z\":" E("F32", "0", "16", "16") "}", 8, "past the 8-byte"),
    BAD("trailing data byte", "{" A8 "}", 9, "1 trailing bytes"),
    BAD("data with no tensor", "{}", 8, "8 trailing bytes"),
    /* ---- strings: UTF-8 and escapes */
    BAD("invalid UTF-8 name", "{\"\xff\":" E("F32", "2", "0", "8") "}", 8, "invalid UTF-8"),
    BAD("overlong UTF-8", "{\"\xc0\xaf\":" E("F32", "2", "0", "8") "}", 8, "invalid UTF-8"),
    BAD("UTF-8 surrogate", "{\"\xed\xa0\x80\":" E("F32", "2", "0", "8") "}", 8, "invalid UTF-8"),
    BAD("cut UTF-8 sequence", "{\"\xe2\x82\":" E("F32", "2", "0", "8") "}", 8, "invalid UTF-8"),
    BAD("UTF-8 past U+10FFFF", "{\"\xf4\x90\x80\x80\":" E("F32", "2", "0", "8") "}", 8, "invalid UTF-8"),
    BAD("UTF-8 continuation first", "{\"\x80" "a\":" E("F32", "2", "0", "8") "}", 8, "invalid UTF-8"),
    BAD("invalid UTF-8 metadata value", "{\"__metadata__\":{\"k\":\"v\xfe\"}}", 0, "invalid UTF-8"),
    BAD("invalid UTF-8 in dtype", "{\"a\":" E("F\xff", "2", "0", "8") "}", 8, "invalid UTF-8"),
    BAD("lone high surrogate", "{\"\\ud800\":" E("F32", "2", "0", "8") "}", 8, "lone high surrogate \\ud800"),
    BAD("high surrogate then text", "{\"\\ud83dx\":" E("F32", "2", "0", "8") "}", 8, "lone high surrogate"),
    BAD("high surrogate then BMP", "{\"\\ud83d\\u0041\":" E("F32", "2", "0", "8") "}", 8,
        "not followed by a low surrogate"),
    BAD("two high surrogates", "{\"\\ud83d\\ud83d\":" E("F32", "2", "0", "8") "}", 8, "not followed by a low surrogate"),
    BAD("lone low surrogate", "{\"\\udc00\":" E("F32", "2", "0", "8") "}", 8, "lone low surrogate \\udc00"),
    BAD("reversed pair", "{\"\\ude00\\ud83d\":" E("F32", "2", "0", "8") "}", 8, "lone low surrogate"),
    BAD("lone surrogate in metadata", "{\"__metadata__\":{\"k\":\"\\uDBFF\"}}", 0, "lone high surrogate"),
    BAD("\\u12G4", "{\"\\u12G4\":" E("F32", "2", "0", "8") "}", 8, "is not 4 hex digits"),
    BAD("\\u with 2 digits", "{\"\\u12\":" E("F32", "2", "0", "8") "}", 8, "is not 4 hex digits"),
    BAD("\\u at the end", "{\"\\u", 0, "\\u escape cut short"),
    BAD("\\U escape", "{\"\\U0041\":" E("F32", "2", "0", "8") "}", 8, "bad escape \\U"),
    BAD("\\x escape", "{\"\\x41\":" E("F32", "2", "0", "8") "}", 8, "bad escape \\x"),
    BAD("\\' escape", "{\"\\'\":" E("F32", "2", "0", "8") "}", 8, "bad escape \\'"),
    BAD("escaped NUL in a name", "{\"a\\u0000b\":" E("F32", "2", "0", "8") "}", 8, "NUL"),
    BAD("escaped NUL alone", "{\"\\u0000\":" E("F32", "2", "0", "8") "}", 8, "tensor name \"\\u0000\" contains a NUL"),
    BAD("escaped NUL in a metadata key", "{\"__metadata__\":{\"k\\u0000\":\"v\"}}", 0, "metadata key"),
    BAD("escaped NUL in a metadata value", "{\"__metadata__\":{\"k\":\"v\\u0000\"}}", 0, "metadata value of \"k\""),
    BAD("raw control character", "{\"a\x01\":" E("F32", "2", "0", "8") "}", 8, "control character \\x01"),
    BAD("raw tab in a string", "{\"a\tb\":" E("F32", "2", "0", "8") "}", 8, "control character"),
    BAD("raw DEL-free newline in a string", "{\"a\nb\":" E("F32", "2", "0", "8") "}", 8, "control character"),
    BAD("unterminated string", "{\"abc", 0, "unterminated string"),
    {"raw NUL byte in a name", "{\"a\0b\":{}}", sizeof "{\"a\0b\":{}}" - 1, 0, 0, 0, NX_ERR_IO, "control character \\x00", 0, NULL, 0},
    /* ---- valid edge cases */
    OK("empty header", "{}", 0, 0, NULL),
    OK("empty header padded as the crate writes it", "{}      ", 0, 0, NULL),
    OK("__metadata__ only", "{\"__metadata__\":{\"format\":\"pt\"}}", 0, 0, NULL),
    OK("__metadata__ null (the crate's Option)", "{\"__metadata__\":null}", 0, 0, NULL),
    OK("empty __metadata__", "{\"__metadata__\":{}}", 0, 0, NULL),
    OK("zero-size tensor", "{\"z\":" E("F32", "0", "0", "0") "}", 0, 1, "z"),
    OK("zero-size beside data", "{\"z\":" E("F32", "0,3", "0", "0") "," A8 "}", 8, 2, "z"),
    OK("zero-size between tensors", "{" A8 ",\"z\":" E("I64", "5,0", "8", "8") ",\"b\":" E("F32", "2", "8", "16") "}", 16,
       3, "b"),
    OK("two zero-size tensors at one offset", "{\"y\":" E("F32", "0", "0", "0") ",\"z\":" E("BOOL", "0", "0", "0") "," A8 "}",
       8, 3, "y"),
    OK("zero-size with an int64-max dim", "{\"z\":" E("F32", "9223372036854775807,0", "0", "0") "}", 0, 1, "z"),
    OK("scalar", "{\"s\":" E("F64", "", "0", "8") "}", 8, 1, "s"),
    OK("entries out of offset order", "{\"b\":" E("F32", "2", "8", "16") "," A8 "}", 16, 2, "b"),
    OK("every dtype", "{\"a\":" E("F64", "1", "0", "8") ",\"b\":" E("I64", "1", "8", "16") ",\"c\":" E("F32", "1", "16", "20")
       ",\"d\":" E("I32", "1", "20", "24") ",\"e\":" E("F16", "1", "24", "26") ",\"f\":" E("BF16", "1", "26", "28")
       ",\"g\":" E("BOOL", "1", "28", "29") "}", 29, 7, "g"),
    OK("valid escapes in a name", "{\"a\\\"b\\\\c\\/d\\n\\t\\b\\f\\r\":" E("F32", "2", "0", "8") "}", 8, 1,
       "a\"b\\c/d\n\t\b\f\r"),
    OK("escaped control character", "{\"\\u0001x\":" E("F32", "2", "0", "8") "}", 8, 1, "\x01x"),
    OK("non-ASCII UTF-8 name", "{\"" UNICODE_NAME "\":" E("F32", "2", "0", "8") "}", 8, 1, UNICODE_NAME),
    OK("UTF-8 at the edges", "{\"\xc2\x80\xdf\xbf\xe0\xa0\x80\xef\xbf\xbf\xf0\x90\x80\x80\xf4\x8f\xbf\xbf\":" E("F32", "2", "0", "8") "}",
       8, 1, "\xc2\x80\xdf\xbf\xe0\xa0\x80\xef\xbf\xbf\xf0\x90\x80\x80\xf4\x8f\xbf\xbf"),
    OK("surrogate pair", "{\"\\ud83d\\ude00\":" E("F32", "2", "0", "8") "}", 8, 1, "\xf0\x9f\x98\x80"),
    OK("highest surrogate pair", "{\"\\uDBFF\\uDFFF\":" E("F32", "2", "0", "8") "}", 8, 1, "\xf4\x8f\xbf\xbf"),
    OK("BMP escapes, upper-case hex", "{\"\\u00E9\\u4E2D\\uFFFF\":" E("F32", "2", "0", "8") "}", 8, 1,
       "\xc3\xa9\xe4\xb8\xad\xef\xbf\xbf"),
    OK("empty name", "{\"\":" E("F32", "2", "0", "8") "}", 8, 1, ""),
    OK("name like __metadata__", "{\"__metadata__x\":" E("F32", "2", "0", "8") "}", 8, 1, "__metadata__x"),
    OK("whitespace everywhere", "{ \t\r\n\"a\" \n:\t{ \"dtype\" : \"F32\" ,\r\n\"shape\" : [ 2 ] , \"data_offsets\" : [ 0 , 8 ] } \n}\t\r\n ",
       8, 1, "a"),
    OK("metadata with escapes and UTF-8", "{\"__metadata__\":{\"k\\u00e9\":\"v\\n\\ud83d\\ude00 \xc3\xa9\"}," A8 "}", 8, 1, "a"),
};

static void expect_refused_st(const st_case* c, const char* path, int index) {
  nx_safetensors st = SENTINEL;
  const int64_t live = nx_live_handle_count(NX_HANDLE_SAFETENSORS);
  nx_status s = nx_safetensors_open(&st, path);
  const char* msg = nx_last_error_message();
  if (s != c->want)
    fail_msg("case %d (%s): nx_safetensors_open returned %s, expected %s (message: %s)", index, c->what,
             nx_status_string(s), nx_status_string(c->want), msg);
  if (st != NULL) fail_msg("case %d (%s): the handle is not NULL after a failed open", index, c->what);
  if (!strstr(msg, "nx_safetensors_open")) fail_msg("case %d (%s): message does not name the function: %s", index, c->what, msg);
  if (c->needle && !strstr(msg, c->needle))
    fail_msg("case %d (%s): message \"%s\" does not mention \"%s\"", index, c->what, msg, c->needle);
  if (nx_live_handle_count(NX_HANDLE_SAFETENSORS) != live) fail_msg("case %d (%s): a handle was left alive", index, c->what);
  if (getenv("NX_HOSTILE_VERBOSE")) printf("  %-45s %s\n", c->what, msg);
}

static void expect_opens_st(const st_case* c, const char* path, int index) {
  nx_safetensors st = NULL;
  nx_status s = nx_safetensors_open(&st, path);
  if (s != NX_OK)
    fail_msg("valid case %d (%s): nx_safetensors_open returned %s: %s", index, c->what, nx_status_string(s),
             nx_last_error_message());
  size_t count = 99;
  NX_OK_(nx_safetensors_count(st, &count));
  if (count != c->count) fail_msg("valid case %d (%s): %zu tensors, expected %zu", index, c->what, count, c->count);
  if (c->needle) { /* the name as decoded must fetch the tensor */
    nx_tensor t = NULL;
    s = nx_safetensors_get(&t, st, c->needle, CPU, NULL);
    if (s != NX_OK)
      fail_msg("valid case %d (%s): nx_safetensors_get returned %s: %s", index, c->what, nx_status_string(s),
               nx_last_error_message());
    nx_tensor_free(t);
    /* nx_safetensors_name gives back the same bytes for one of the entries */
    int found = 0;
    for (size_t i = 0; i < count; ++i) {
      const char* name = NULL;
      NX_OK_(nx_safetensors_name(st, i, &name));
      found |= !strcmp(name, c->needle);
    }
    if (!found) fail_msg("valid case %d (%s): no entry is named as fetched", index, c->what);
  }
  nx_safetensors_free(st);
}

static void write_st_case(const char* path, const st_case* c) {
  if (!c->header) {
    nx_write_file(path, c->raw, c->raw_len);
    return;
  }
  const size_t nh = c->header_len ? c->header_len : strlen(c->header);
  const uint64_t declared = c->lie ? c->declared_len : nh;
  unsigned char* buf = calloc(8 + nh + c->data_len + 1, 1);
  assert_non_null(buf);
  for (int i = 0; i < 8; ++i) buf[i] = (unsigned char)(declared >> (8 * i));
  memcpy(buf + 8, c->header, nh);
  nx_write_file(path, buf, 8 + nh + c->data_len);
  free(buf);
}

static void test_safetensors_table(void** state) {
  (void)state;
  const char* path = nx_scratch_path("case.safetensors");
  int refused = 0, opened = 0;
  for (size_t i = 0; i < sizeof k_st_cases / sizeof k_st_cases[0]; ++i) {
    const st_case* c = &k_st_cases[i];
    write_st_case(path, c);
    /* NX_HOSTILE_DUMP=folder keeps a copy of every case (NNN.safetensors, listed in cases.tsv),
     * to hold the table against another reader, such as the safetensors crate */
    const char* dump = getenv("NX_HOSTILE_DUMP");
    if (dump) {
      char copy[512];
      snprintf(copy, sizeof copy, "%s/%03zu.safetensors", dump, i);
      write_st_case(copy, c);
      snprintf(copy, sizeof copy, "%s/cases.tsv", dump);
      FILE* list = fopen(copy, i ? "a" : "w");
      assert_non_null(list);
      fprintf(list, "%03zu\t%s\t%s\n", i, c->want == NX_OK ? "ok" : "refused", c->what);
      fclose(list);
    }
    if (c->want == NX_OK) {
      expect_opens_st(c, path, (int)i);
      ++opened;
    } else {
      expect_refused_st(c, path, (int)i);
      ++refused;
    }
  }
  remove(path);
  printf("hostile SafeTensors files: %d refused as expected; valid edge cases: %d opened\n", refused, opened);
  assert_true(refused >= 60);
}

/* Hostile inputs too large for a literal: built here. */
static void test_safetensors_generated(void** state) {
  (void)state;
  const char* path = nx_scratch_path("generated.safetensors");
  /* deep nesting: arrays and objects 100000 levels deep must not exhaust the stack */
  const size_t depth = 100000;
  char* deep = malloc(2 * depth + 16);
  assert_non_null(deep);
  size_t k = 0;
  deep[k++] = '{';
  memcpy(deep + k, "\"a\":", 4);
  k += 4;
  for (size_t i = 0; i < depth; ++i) deep[k++] = '[';
  deep[k] = 0;
  st_case c = BAD("100000 nested arrays", deep, 0, "nesting too deep");
  write_st_case(path, &c);
  expect_refused_st(&c, path, 0);
  k = 0;
  deep[k++] = '{';
  for (size_t i = 0; i < depth / 5; ++i) {
    memcpy(deep + k, "\"a\":{", 5);
    k += 5;
  }
  deep[k] = 0;
  st_case c2 = BAD("20000 nested objects", deep, 0, "nesting too deep");
  write_st_case(path, &c2);
  expect_refused_st(&c2, path, 1);
  free(deep);
  /* nesting just inside the bound is a JSON question only: the entry is refused as an entry */
  st_case c3 = BAD("nesting within the bound", "{\"a\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}", 0,
                   "entry \"a\" is not an object");
  write_st_case(path, &c3);
  expect_refused_st(&c3, path, 2);
  /* a memory bomb: 5 million values in a 10 MB header (each would take ~150 bytes parsed) */
  const size_t nvalues = 5000000;
  char* many = malloc(2 * nvalues + 64);
  assert_non_null(many);
  k = (size_t)sprintf(many, "{\"a\":{\"dtype\":\"F32\",\"shape\":[");
  for (size_t i = 0; i < nvalues; ++i) {
    many[k++] = '1';
    many[k++] = ',';
  }
  k += (size_t)sprintf(many + k - 1, "],\"data_offsets\":[0,4]}}") - 1;
  many[k] = 0;
  st_case c4 = BAD("5 million values", many, 0, "more than 4194304 values");
  c4.data_len = 4;
  write_st_case(path, &c4);
  expect_refused_st(&c4, path, 3);
  free(many);
  /* a folder and a missing file */
  st_case c5 = BAD("a folder", "", 0, nx_scratch_dir);
  expect_refused_st(&c5, nx_scratch_dir, 4);
  st_case c6 = BAD("no such file", "", 0, "cannot open");
  expect_refused_st(&c6, nx_scratch_path("missing.safetensors"), 5);
  remove(path);
  printf("generated hostile SafeTensors files: 6 refused as expected\n");
}

/* A file opened and then truncated: the whole file was read at open (no mmap), so the handle
 * keeps working (no SIGBUS), and a reopen refuses the short file. */
static void test_safetensors_truncated_after_open(void** state) {
  (void)state;
  const char* path = nx_scratch_path("truncated.safetensors");
  const int64_t shape[1] = {1024};
  nx_tensor a = NULL;
  NX_OK_(nx_tensor_ones(&a, shape, 1, NX_F32, CPU, NULL));
  const char* names[1] = {"a"};
  NX_OK_(nx_safetensors_save(path, names, &a, 1));
  nx_tensor_free(a);
  nx_safetensors st = NULL;
  NX_OK_(nx_safetensors_open(&st, path));
  assert_int_equal(truncate(path, 100), 0);
  nx_tensor t = NULL;
  NX_OK_(nx_safetensors_get(&t, st, "a", CPU, NULL));
  float back[1024];
  NX_OK_(nx_tensor_copy_to_host(t, back, sizeof back, NULL));
  assert_true(back[0] == 1.0f && back[1023] == 1.0f);
  nx_tensor_free(t);
  nx_safetensors_free(st);
  nx_safetensors again = SENTINEL;
  EXPECT_ERR(NX_ERR_IO, nx_safetensors_open(&again, path), "nx_safetensors_open", "past the");
  assert_null(again);
  remove(path);
}

/* ---------------------------------------------------------------- tokenizer files */
typedef struct {
  const char* what;
  const char* text;
  size_t len;        /* 0: strlen(text) */
  nx_status want;
  const char* needle; /* the message contains it (failures) */
  int64_t vocab;      /* for NX_OK: the vocabulary size */
} tok_case;

static void run_tok_case(const tok_case* c, int index, int* refused, int* opened) {
  const char* path = nx_scratch_path("case.bpe");
  nx_write_file(path, c->text, c->len ? c->len : strlen(c->text));
  nx_tokenizer tok = SENTINEL;
  const int64_t live = nx_live_handle_count(NX_HANDLE_TOKENIZER);
  nx_status s = nx_tokenizer_load(&tok, path);
  const char* msg = nx_last_error_message();
  if (s != c->want)
    fail_msg("tokenizer case %d (%s): nx_tokenizer_load returned %s, expected %s (message: %s)", index, c->what,
             nx_status_string(s), nx_status_string(c->want), msg);
  if (c->want == NX_OK) {
    int64_t vocab = 0;
    NX_OK_(nx_tokenizer_vocab_size(tok, &vocab));
    if (vocab != c->vocab) fail_msg("tokenizer case %d (%s): vocabulary %lld, expected %lld", index, c->what, (long long)vocab, (long long)c->vocab);
    nx_tokenizer_free(tok);
    ++*opened;
  } else {
    if (tok != NULL) fail_msg("tokenizer case %d (%s): the handle is not NULL after a failed load", index, c->what);
    if (!strstr(msg, "nx_tokenizer_load")) fail_msg("tokenizer case %d (%s): message does not name the function: %s", index, c->what, msg);
    if (!strstr(msg, c->needle))
      fail_msg("tokenizer case %d (%s): message \"%s\" does not mention \"%s\"", index, c->what, msg, c->needle);
    if (nx_live_handle_count(NX_HANDLE_TOKENIZER) != live) fail_msg("tokenizer case %d (%s): a handle was left alive", index, c->what);
    if (getenv("NX_HOSTILE_VERBOSE")) printf("  %-45s %s\n", c->what, msg);
    ++*refused;
  }
  remove(path);
}

/* Appends "a b\n" to buf at *k. */
static void add_merge_line(char* buf, size_t* k, int a, int b) { *k += (size_t)sprintf(buf + *k, "%d %d\n", a, b); }

static void test_tokenizer_table(void** state) {
  (void)state;
  /* merge bomb 1: each merge doubles the last piece: 2^40 bytes after 40 lines */
  static char doubling[2048];
  size_t k = (size_t)sprintf(doubling, "nexusgrad-bpe 1\n40\n");
  add_merge_line(doubling, &k, 97, 97);
  for (int i = 1; i < 40; ++i) add_merge_line(doubling, &k, 256 + i - 1, 256 + i - 1);
  /* merge bomb 2: every piece under the per-piece bound, 70 MB in all: 14 doublings to a 16 KiB
   * piece, 256 pieces of 16 KiB + 1 byte, then joins of two of those (32 KiB each) */
  const int joins = 2200;
  char* wide = malloc(64 + (14 + 256 + (size_t)joins) * 16);
  assert_non_null(wide);
  k = (size_t)sprintf(wide, "nexusgrad-bpe 1\n%d\n", 14 + 256 + joins);
  add_merge_line(wide, &k, 97, 97); /* 256: 2 bytes */
  for (int i = 1; i < 14; ++i) add_merge_line(wide, &k, 256 + i - 1, 256 + i - 1); /* 269: 16 KiB */
  for (int c = 0; c < 256; ++c) add_merge_line(wide, &k, 269, c); /* 270..525: 16 KiB + 1 */
  for (int j = 0; j < joins; ++j) add_merge_line(wide, &k, 270 + j / 256, 270 + j % 256);
  const tok_case cases[] = {
      {"empty file", "", 0, NX_ERR_IO, "not a NexusGrad tokenizer file", 0},
      {"wrong magic", "nexusgrad-bpx 1\n0\n", 0, NX_ERR_IO, "not a NexusGrad tokenizer file", 0},
      {"binary junk", "\x7f" "ELF\x02\x01\x01", 7, NX_ERR_IO, "not a NexusGrad tokenizer file", 0},
      {"magic with a NUL", "nexusgrad-bpe 1\0\n0\n", sizeof "nexusgrad-bpe 1\0\n0\n" - 1, NX_ERR_IO, "version", 0},
      {"version 2", "nexusgrad-bpe 2\n0\n", 0, NX_ERR_IO, "unsupported tokenizer file version \"2\"", 0},
      {"version 1abc", "nexusgrad-bpe 1abc\n0\n", 0, NX_ERR_IO, "version \"1abc\"", 0},
      {"count missing", "nexusgrad-bpe 1\n", 0, NX_ERR_IO, "merge count is missing", 0},
      {"count 12abc", "nexusgrad-bpe 1\n12abc\n", 0, NX_ERR_IO, "merge count \"12abc\" is not a decimal number", 0},
      {"count -1", "nexusgrad-bpe 1\n-1\n", 0, NX_ERR_IO, "merge count \"-1\"", 0},
      {"count +1", "nexusgrad-bpe 1\n+1\n97 98\n", 0, NX_ERR_IO, "merge count \"+1\"", 0},
      {"count 01", "nexusgrad-bpe 1\n01\n97 98\n", 0, NX_ERR_IO, "merge count \"01\" has a leading zero", 0},
      {"count with a space", "nexusgrad-bpe 1\n 1\n97 98\n", 0, NX_ERR_IO, "merge count \" 1\"", 0},
      {"count 1e3", "nexusgrad-bpe 1\n1e3\n", 0, NX_ERR_IO, "merge count \"1e3\"", 0},
      {"count 2^64", "nexusgrad-bpe 1\n18446744073709551616\n", 0, NX_ERR_IO, "merge count 18446744073709551616 is above the largest allowed, 1048576", 0},
      {"count past the limit", "nexusgrad-bpe 1\n2000000\n", 0, NX_ERR_IO, "merge count 2000000 is above the largest allowed, 1048576", 0},
      {"fewer merges than declared", "nexusgrad-bpe 1\n3\n97 98\n256 99\n", 0, NX_ERR_IO, "merge 2 is missing (the file declares 3", 0},
      {"more merges than declared", "nexusgrad-bpe 1\n1\n97 98\n256 99\n", 0, NX_ERR_IO, "unexpected text after the 1 declared merges", 0},
      {"trailing junk line", "nexusgrad-bpe 1\n0\njunk", 0, NX_ERR_IO, "unexpected text", 0},
      {"trailing blank line", "nexusgrad-bpe 1\n0\n\n", 0, NX_ERR_IO, "unexpected text", 0},
      {"merge 97 98abc", "nexusgrad-bpe 1\n1\n97 98abc\n", 0, NX_ERR_IO, "merge 0: the second token id \"98abc\"", 0},
      {"merge 97abc 98", "nexusgrad-bpe 1\n1\n97abc 98\n", 0, NX_ERR_IO, "merge 0: the first token id \"97abc\"", 0},
      {"merge with one id", "nexusgrad-bpe 1\n1\n97\n", 0, NX_ERR_IO, "is not two token ids separated by one space", 0},
      {"merge with two spaces", "nexusgrad-bpe 1\n1\n97  98\n", 0, NX_ERR_IO, "the second token id \" 98\"", 0},
      {"merge with a tab", "nexusgrad-bpe 1\n1\n97\t98\n", 0, NX_ERR_IO, "not two token ids", 0},
      {"merge with three ids", "nexusgrad-bpe 1\n1\n97 98 99\n", 0, NX_ERR_IO, "\"98 99\"", 0},
      {"merge with a NUL", "nexusgrad-bpe 1\n1\n97 9\0" "8\n", sizeof "nexusgrad-bpe 1\n1\n97 9\0" "8\n" - 1, NX_ERR_IO, "the second token id", 0},
      {"negative id", "nexusgrad-bpe 1\n1\n-1 97\n", 0, NX_ERR_IO, "\"-1\" is not a decimal number", 0},
      {"id not yet made", "nexusgrad-bpe 1\n1\n256 97\n", 0, NX_ERR_IO, "the first token id 256 is above the largest allowed, 255", 0},
      {"self-referencing merge", "nexusgrad-bpe 1\n2\n97 98\n257 97\n", 0, NX_ERR_IO, "merge 1: the first token id 257", 0},
      {"id 2^63", "nexusgrad-bpe 1\n1\n97 9223372036854775808\n", 0, NX_ERR_IO, "9223372036854775808 is above the largest allowed, 255", 0},
      {"id of 20 digits", "nexusgrad-bpe 1\n1\n97 99999999999999999999\n", 0, NX_ERR_IO, "99999999999999999999 is above the largest allowed, 255", 0},
      {"id 0x61", "nexusgrad-bpe 1\n1\n0x61 98\n", 0, NX_ERR_IO, "\"0x61\"", 0},
      {"id with a leading zero", "nexusgrad-bpe 1\n1\n097 98\n", 0, NX_ERR_IO, "\"097\" has a leading zero", 0},
      {"repeated merge", "nexusgrad-bpe 1\n2\n97 98\n97 98\n", 0, NX_ERR_IO, "merge 1 (97 98) repeats merge 0", 0},
      {"merge bomb: doubling pieces", doubling, 0, NX_ERR_IO, "merge 16 (271 271) makes a piece of 131072 bytes, more than the limit of 65536", 0},
      {"merge bomb: many wide pieces", wide, 0, NX_ERR_IO, "past the limit of 67108864 bytes in all", 0},
      /* valid edge cases */
      {"no merges", "nexusgrad-bpe 1\n0\n", 0, NX_OK, NULL, 256},
      {"two merges", "nexusgrad-bpe 1\n2\n97 98\n256 99\n", 0, NX_OK, NULL, 258},
      {"no final newline", "nexusgrad-bpe 1\n2\n97 98\n256 99", 0, NX_OK, NULL, 258},
      {"CRLF lines", "nexusgrad-bpe 1\r\n2\r\n97 98\r\n256 0\r\n", 0, NX_OK, NULL, 258},
      {"a piece of exactly 64 KiB", NULL, 0, NX_OK, NULL, 256 + 16},
  };
  /* the last valid case: 16 doublings, the last piece exactly 65536 bytes */
  static char limit_file[512];
  k = (size_t)sprintf(limit_file, "nexusgrad-bpe 1\n16\n");
  add_merge_line(limit_file, &k, 97, 97);
  for (int i = 1; i < 16; ++i) add_merge_line(limit_file, &k, 256 + i - 1, 256 + i - 1);
  int refused = 0, opened = 0;
  const size_t n = sizeof cases / sizeof cases[0];
  for (size_t i = 0; i < n; ++i) {
    tok_case c = cases[i];
    if (!c.text) c.text = limit_file;
    run_tok_case(&c, (int)i, &refused, &opened);
  }
  free(wide);
  /* a folder and a missing file */
  nx_tokenizer tok = SENTINEL;
  EXPECT_ERR(NX_ERR_IO, nx_tokenizer_load(&tok, nx_scratch_dir), "nx_tokenizer_load", nx_scratch_dir);
  assert_null(tok);
  tok = SENTINEL;
  EXPECT_ERR(NX_ERR_IO, nx_tokenizer_load(&tok, nx_scratch_path("missing.bpe")), "nx_tokenizer_load", "cannot open");
  assert_null(tok);
  refused += 2;
  printf("hostile tokenizer files: %d refused as expected; valid edge cases: %d loaded\n", refused, opened);
  assert_true(refused >= 20);
}

/* A trained tokenizer still saves and loads under the bounds, and encodes the same. */
static void test_tokenizer_round_trip(void** state) {
  (void)state;
  const char* text = "the cat sat on the mat, the cat ate the rat; aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
  nx_tokenizer tok = NULL, back = NULL;
  NX_OK_(nx_tokenizer_bpe_train(&tok, text, strlen(text), 300));
  const char* path = nx_scratch_path("trained.bpe");
  NX_OK_(nx_tokenizer_save(tok, path));
  NX_OK_(nx_tokenizer_load(&back, path));
  int64_t v1 = 0, v2 = 0;
  NX_OK_(nx_tokenizer_vocab_size(tok, &v1));
  NX_OK_(nx_tokenizer_vocab_size(back, &v2));
  assert_int_equal(v1, v2);
  nx_tensor e1 = NULL, e2 = NULL;
  NX_OK_(nx_tokenizer_encode(&e1, tok, text, strlen(text)));
  NX_OK_(nx_tokenizer_encode(&e2, back, text, strlen(text)));
  int64_t n1 = 0, n2 = 0;
  NX_OK_(nx_tensor_numel(e1, &n1));
  NX_OK_(nx_tensor_numel(e2, &n2));
  assert_int_equal(n1, n2);
  const size_t bytes = (size_t)n1 * sizeof(int64_t);
  int64_t* a = malloc(bytes + 8);
  int64_t* b = malloc(bytes + 8);
  NX_OK_(nx_tensor_copy_to_host(e1, a, bytes, NULL));
  NX_OK_(nx_tensor_copy_to_host(e2, b, bytes, NULL));
  assert_memory_equal(a, b, bytes);
  free(a);
  free(b);
  nx_tensor_free(e1);
  nx_tensor_free(e2);
  nx_tokenizer_free(tok);
  nx_tokenizer_free(back);
  remove(path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      NX_TEST(test_safetensors_table),
      NX_TEST(test_safetensors_generated),
      NX_TEST(test_safetensors_truncated_after_open),
      NX_TEST(test_tokenizer_table),
      NX_TEST(test_tokenizer_round_trip),
  };
  return cmocka_run_group_tests(tests, nx_scratch_create, nx_scratch_remove);
}
