/*
 * test_bytes.c - the one byte codec (base/bytes.c): what it writes is what it reads back,
 * little-endian; a read past the end or a write past a fixed buffer or a growing one's
 * bound is refused and sticks, so a codec checks once; a length-prefixed string longer
 * than what is left is refused whatever its length field says (no overflow).
 */
#include "support.h"
#include "base/bytes.h"

#include <stdlib.h>
#include <string.h>

START_TEST(round_trip_little_endian)
{
    kpc__writer w;
    kpc__writer_grow(&w, 0);
    kpc__put_u8(&w, 0x01);
    kpc__put_u16(&w, 0x0302);
    kpc__put_u32(&w, 0x07060504u);
    kpc__put_u64(&w, 0x0f0e0d0c0b0a0908ull);
    kpc__put_lstr(&w, 4, "abc", 3);
    kpc__put_lstr(&w, 2, NULL, 0);
    kpc__put_fixed_str(&w, "too long for four", 4);
    kpc__put_zeros(&w, 2);
    void *buf;
    size_t size;
    ck_assert_int_eq(kpc__writer_finish(&w, &buf, &size), KPC_OK);
    ck_assert_uint_eq(size, 1 + 2 + 4 + 8 + 4 + 3 + 2 + 4 + 2);
    const uint8_t *b = buf;
    for (int i = 0; i < 15; i++) /* the integers, byte by byte: little-endian */
        ck_assert_uint_eq(b[i], i + 1);
    ck_assert_int_eq(memcmp(b + 15, "\3\0\0\0abc\0\0too\0\0\0", 15), 0);

    kpc__reader r;
    kpc__reader_init(&r, buf, size);
    ck_assert_uint_eq(kpc__get_u8(&r), 0x01);
    ck_assert_uint_eq(kpc__get_u16(&r), 0x0302);
    ck_assert_uint_eq(kpc__get_u32(&r), 0x07060504u);
    ck_assert_uint_eq(kpc__get_u64(&r), 0x0f0e0d0c0b0a0908ull);
    size_t n;
    char *s = kpc__get_lstr_dup(&r, 4, 100, &n);
    ck_assert_str_eq(s, "abc");
    ck_assert_uint_eq(n, 3);
    free(s);
    ck_assert_ptr_nonnull(kpc__get_lstr(&r, 2, 100, &n));
    ck_assert_uint_eq(n, 0);
    char field[4];
    kpc__get_fixed_str(&r, field, sizeof field);
    ck_assert_str_eq(field, "too");
    ck_assert(!kpc__reader_done(&r)); /* two bytes left: trailing bytes are not "done" */
    kpc__get_skip(&r, 2);
    ck_assert(kpc__reader_done(&r));
    free(buf);
}
END_TEST

START_TEST(reads_past_the_end_stick)
{
    const uint8_t b[6] = {1, 2, 3, 4, 5, 6};
    kpc__reader r;
    kpc__reader_init(&r, b, sizeof b);
    ck_assert_uint_eq(kpc__get_u32(&r), 0x04030201u);
    ck_assert_uint_eq(kpc__get_u32(&r), 0); /* 2 left: refused, zero */
    ck_assert(r.bad);
    ck_assert_uint_eq(kpc__get_u8(&r), 0); /* sticky: even one that would fit */
    ck_assert_uint_eq(kpc__reader_left(&r), 0);
    ck_assert(!kpc__reader_done(&r));

    /* a length field of 2^64 - 1, and one just over what is left: both refused */
    const uint8_t huge[12] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 'a', 'b', 'c', 'd'};
    size_t n = 99;
    kpc__reader_init(&r, huge, sizeof huge);
    ck_assert_ptr_null(kpc__get_lstr(&r, 8, SIZE_MAX, &n));
    ck_assert(r.bad);
    ck_assert_uint_eq(n, 0);
    const uint8_t over[7] = {4, 0, 0, 0, 'a', 'b', 'c'};
    kpc__reader_init(&r, over, sizeof over);
    ck_assert_ptr_null(kpc__get_lstr_dup(&r, 4, 100, NULL));
    ck_assert(r.bad);
    /* over the caller's bound though present */
    const uint8_t ok[7] = {3, 0, 0, 0, 'a', 'b', 'c'};
    kpc__reader_init(&r, ok, sizeof ok);
    ck_assert_ptr_null(kpc__get_lstr(&r, 4, 2, &n));
    ck_assert(r.bad);
    /* a fixed string field with no NUL inside it */
    char field[3];
    kpc__reader_init(&r, "abc", 3);
    kpc__get_fixed_str(&r, field, sizeof field);
    ck_assert(r.bad);
    ck_assert_str_eq(field, "ab");
}
END_TEST

START_TEST(writes_past_the_end_stick)
{
    uint8_t buf[8];
    kpc__writer w;
    kpc__writer_fixed(&w, buf, sizeof buf);
    kpc__put_u32(&w, 1);
    kpc__put_u64(&w, 2); /* 4 left: refused whole, not cut */
    ck_assert(!kpc__writer_ok(&w));
    kpc__put_u8(&w, 3); /* sticky */
    ck_assert_uint_eq(w.len, 4);
    void *out;
    size_t size;
    ck_assert_int_eq(kpc__writer_finish(&w, &out, &size), KPC_E_INVALID);

    kpc__writer_grow(&w, 10);
    kpc__put_u64(&w, 1);
    kpc__put_lstr(&w, 1, "abc", 300); /* 300 does not fit a one-byte length */
    ck_assert(!kpc__writer_ok(&w));
    ck_assert_int_eq(kpc__writer_finish(&w, &out, &size), KPC_E_INVALID);
    kpc__writer_grow(&w, 10);
    kpc__put_u64(&w, 1);
    kpc__put_u32(&w, 1); /* 12 > the bound of 10 */
    ck_assert_int_eq(kpc__writer_finish(&w, &out, &size), KPC_E_INVALID);
}
END_TEST

int main(void)
{
    const TTest *tests[] = {round_trip_little_endian, reads_past_the_end_stick, writes_past_the_end_stick, NULL};
    return ts_main_case("bytes", "codec", 0, NULL, NULL, tests);
}
