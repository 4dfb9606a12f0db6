/*
 * test_record.c - a record is taken where it lies in the allocation it was read in
 * (storage/record.c): whatever its offset there, its payload comes out aligned as malloc
 * aligns and byte for byte, with nothing outside the record's own bytes written; a
 * refused record is left exactly as it was, still the caller's.
 */
#include "support.h"
#include "storage/record.h"
#include "platform/names.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { CODE = 4603, REQUEST = 77, ROOM = 64 };

static void *names; /* a table of one name, made by encoded() */
static size_t names_size;

/* A CODE record of CODE bytes, a table of one lowered name and a request section of
 * REQUEST, encoded whole. */
static uint8_t *encoded(kpc_record *r, uint8_t *code, uint8_t *request, size_t *size)
{
    const char *expr[] = {"saxpy"}, *lowered[] = {"_Z5saxpyPf"};
    free(names);
    ck_assert_int_eq(kpc_names_encode(expr, lowered, 1, &names, &names_size), KPC_OK);
    memset(r, 0, sizeof *r);
    for (int i = 0; i < 16; i++)
        r->key.bytes[i] = (uint8_t)(i * 17 + 3);
    r->kind = KPC_RECORD_CODE;
    strcpy(r->target, "gfx90a");
    strcpy(r->source_name, "saxpy.hip");
    for (size_t i = 0; i < CODE; i++)
        code[i] = (uint8_t)(i * 31 + 7);
    for (size_t i = 0; i < REQUEST; i++)
        request[i] = (uint8_t)(i * 5 + 1);
    r->code_size = CODE;
    r->names_size = names_size;
    r->request = request;
    r->request_size = REQUEST;
    void *buf;
    ck_assert_int_eq(kpc_record_encode(r, code, names, &buf, size), KPC_OK);
    ck_assert_uint_eq(*size, KPC_RECORD_HEADER + CODE + names_size + REQUEST);
    return buf;
}

START_TEST(taken_where_it_lies_aligned)
{
    kpc_record r;
    static uint8_t code[CODE], request[REQUEST];
    size_t size;
    uint8_t *rec = encoded(&r, code, request, &size);
    for (size_t at = 0; at < 2 * KPC_RECORD_ALIGN; at++) {
        /* the record at offset at, between bytes of others (a manifest before it, say) */
        size_t total = ROOM + at + size + ROOM;
        uint8_t *block = malloc(total);
        memset(block, 0xa5, total);
        memcpy(block + ROOM + at, rec, size);
        kpc_record got;
        const char *why = kpc_record_take_at(block, block + ROOM + at, size, &r.key, "gfx90a", KPC_RECORD_CODE, &got);
        ck_assert_msg(why == NULL, "offset %zu: %s", at, why ? why : "");
        ck_assert_ptr_eq(got.block, block);
        ck_assert_uint_eq((uintptr_t)got.payload % KPC_RECORD_ALIGN, 0);
        /* it moved by less than the alignment, within its own header's room */
        uint8_t *payload = got.payload, *was = block + ROOM + at + KPC_RECORD_HEADER;
        ck_assert(payload <= was && was - payload < (ptrdiff_t)KPC_RECORD_ALIGN);
        ck_assert_mem_eq(payload, code, CODE);
        ck_assert_uint_eq(got.code_size, CODE);
        ck_assert_uint_eq(got.request_size, REQUEST);
        ck_assert_mem_eq(payload + CODE, names, names_size);
        ck_assert_str_eq(kpc_names_find(payload + CODE, got.names_size, "saxpy"), "_Z5saxpyPf");
        ck_assert_ptr_eq(got.request, payload + CODE + names_size);
        ck_assert_mem_eq(got.request, request, REQUEST);
        for (size_t i = 0; i < ROOM + at; i++) /* nothing before the record written */
            ck_assert_uint_eq(block[i], 0xa5);
        for (size_t i = ROOM + at + size; i < total; i++) /* nor after it */
            ck_assert_uint_eq(block[i], 0xa5);
        kpc_record_free(&got); /* frees block */
        ck_assert_ptr_null(got.block);
        ck_assert_ptr_null(got.payload);
    }
    free(rec);
    free(names);
    names = NULL;
}
END_TEST

START_TEST(refused_left_as_it_was)
{
    kpc_record r;
    static uint8_t code[CODE], request[REQUEST];
    size_t size;
    uint8_t *rec = encoded(&r, code, request, &size);
    struct {
        const char *why;
        size_t flip;  /* a byte of the payload changed (0: none) */
        size_t short_by;
        const char *target;
    } cases[] = {
        {"payload checksum mismatch", KPC_RECORD_HEADER + 100, 0, "gfx90a"},
        {"truncated", 0, 1, "gfx90a"},
        {"the target does not match", 0, 0, "gfx1030"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        uint8_t *block = malloc(ROOM + size), *copy = malloc(ROOM + size);
        memset(block, 0x5a, ROOM + size);
        memcpy(block + ROOM - 3, rec, size); /* misaligned: a good one would move */
        if (cases[c].flip)
            block[ROOM - 3 + cases[c].flip] ^= 1;
        memcpy(copy, block, ROOM + size);
        kpc_record got;
        const char *why = kpc_record_take_at(block, block + ROOM - 3, size - cases[c].short_by, &r.key,
                                             cases[c].target, KPC_RECORD_CODE, &got);
        ck_assert_str_eq(why ? why : "(taken)", cases[c].why);
        ck_assert_ptr_null(got.block);
        ck_assert_ptr_null(got.payload);
        ck_assert_mem_eq(block, copy, ROOM + size); /* not a byte moved */
        free(block);
        free(copy);
    }
    free(rec);
    free(names);
    names = NULL;
}
END_TEST

int main(void)
{
    const TTest *tests[] = {taken_where_it_lies_aligned, refused_left_as_it_was, NULL};
    return ts_main_case("record", "take", 0, NULL, NULL, tests);
}
