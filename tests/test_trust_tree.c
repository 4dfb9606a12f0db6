/*
 * test_trust_tree.c - every directory and file on the way to a record is trusted, not
 * just the top of the tree, in the cache directory and in KPC_SHARED_DIR alike. Each case
 * builds an honest record, then does what another user who could write one entry of the
 * tree could do, and a fresh cache (a new kpc_cache_open: nothing in memory) must not be
 * served the forged object (a code byte flipped, checksums fixed): it compiles (one more
 * build), gets the honest bytes, logs the refused path, and writes nothing outside the
 * tree:
 *   - v1/ owned by another user; v1/<target> mode 0777; a record directory owned by
 *     another user: the forged record in it is ours (0600), so only the directory's rule
 *     stands between it and the process;
 *   - a record file replaced by another user's; one others may write (0666);
 *   - v1/<target> a symbolic link to a forged tree; a record directory a symbolic link to
 *     a directory outside the tree (the build must not write there).
 * The control: the same forged record, ours and 0600 in a sound tree, is served (so each
 * case would serve it if its rule were not kept). KPC_TRUST_GROUP trusts exactly its
 * group, and what kpc makes under it is the group's. Fake compiler for the matrix; one case through real hipRTC. "Another user" is
 * uid 65534: the cases that chown need root and skip without it.
 */
#define _GNU_SOURCE
#include "support.h"

#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define OTHER 65534

typedef struct tree {
    bool shared;        /* the tree is KPC_SHARED_DIR (else the cache directory) */
    char *dir;          /* the tree attacked */
    char *local;        /* shared: the builder's own cache directory */
    char *outside;      /* a directory outside the tree the attacker points into */
    char real[PATH_MAX]; /* realpath of dir */
    char rec[4400];     /* the honest record's path */
    char target_dir[4400], fan_dir[4400];
    void *honest;
    size_t honest_size;
    uint8_t *forged; /* the whole forged record file */
    size_t forged_size;
    uint8_t *forged_code; /* its code object */
    size_t forged_code_size;
    char attacked[4400]; /* the path a refusal must name */
} tree;

static kpc_source source(void)
{
    return ts_src(ts_kernel_source(3), "tree.hip");
}

/* Build the honest record into t->dir (through the local cache, shared: into both) and
 * make the forged record: the honest one with the last code byte flipped, checksums
 * fixed, the request kept. */
static void tree_make(tree *t, bool shared)
{
    memset(t, 0, sizeof *t);
    t->shared = shared;
    t->dir = ts_tmpdir();
    t->outside = ts_tmpdir();
    ck_assert_int_eq(mkdir(t->outside, 0700), 0);
    if (shared) {
        t->local = ts_tmpdir();
        ck_assert_int_eq(mkdir(t->dir, 0700), 0);
        setenv("KPC_SHARED_DIR", t->dir, 1);
    }
    kpc_cache *c = ts_open(shared ? t->local : t->dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source src = source();
    t->honest = ts_get_code(ctx, &src, &t->honest_size);
    kpc_key key;
    ts_key(ctx, &src, &key);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    ck_assert_ptr_nonnull(realpath(t->dir, t->real));
    ts_record_path(t->dir, ts_target(), &key, "co", t->rec, sizeof t->rec);
    snprintf(t->target_dir, sizeof t->target_dir, "%s/v1/%s", t->real, ts_target());
    snprintf(t->fan_dir, sizeof t->fan_dir, "%s", t->rec);
    *strrchr(t->fan_dir, '/') = '\0';

    size_t n;
    void *bytes = ts_read_file(t->rec, &n);
    ck_assert_msg(bytes != NULL, "no honest record at %s", t->rec);
    kpc_record rec;
    ck_assert_ptr_null(kpc_record_take(bytes, n, &key, ts_target(), KPC_RECORD_CODE, &rec));
    t->forged_code_size = rec.code_size;
    t->forged_code = malloc(rec.code_size);
    memcpy(t->forged_code, rec.payload, rec.code_size);
    t->forged_code[rec.code_size - 1] ^= 0xff;
    const uint8_t *names = (const uint8_t *)rec.payload + rec.code_size;
    t->forged_size = KPC_RECORD_HEADER + rec.code_size + rec.names_size + rec.request_size;
    t->forged = malloc(t->forged_size);
    kpc_record_header(t->forged, &rec, t->forged_code, names);
    uint8_t *p = t->forged + KPC_RECORD_HEADER;
    memcpy(p, t->forged_code, rec.code_size);
    memcpy(p + rec.code_size, names, rec.names_size);
    if (rec.request_size)
        memcpy(p + rec.code_size + rec.names_size, rec.request, rec.request_size);
    kpc_record_free(&rec);
}

static void tree_free(tree *t)
{
    unsetenv("KPC_SHARED_DIR");
    unsetenv("KPC_TRUST_GROUP");
    free(t->honest);
    free(t->forged);
    free(t->forged_code);
    ts_cleanup(t->dir);
    ts_cleanup(t->outside);
    if (t->local)
        ts_cleanup(t->local);
}

/* The forged record at path, mode 0600, owned by uid (and gid) */
static void plant(const tree *t, const char *path, uid_t uid, gid_t gid, mode_t mode)
{
    unlink(path);
    ts_write_file(path, t->forged, t->forged_size);
    ck_assert_int_eq(chmod(path, mode), 0);
    if (uid != geteuid() || gid != getegid())
        ck_assert_int_eq(chown(path, uid, gid), 0);
}

/* Files under path, recursively (the outside directory must not grow) */
static int count_files(const char *path)
{
    DIR *d = opendir(path);
    if (d == NULL)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char sub[4400];
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        struct stat st;
        if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
            n += count_files(sub);
        else
            n++;
    }
    closedir(d);
    return n;
}

/* What a fresh cache gets: its code, the builds it took, its log at error level */
static void *fresh_get(const tree *t, size_t *size, unsigned *builds, char **log, bool fake)
{
    char *fresh_local = t->shared ? ts_tmpdir() : NULL;
    unsigned before = fake ? ts_fake_compiles() : 0;
    ts_log_begin(KPC_LOG_ERROR);
    kpc_cache *c = ts_open(t->shared ? fresh_local : t->dir, 0, 0);
    kpc_context *ctx = ts_context(c);
    kpc_source src = source();
    void *code = ts_get_code(ctx, &src, size);
    kpc_stats st;
    ck_assert_int_eq(kpc_stats_get(c, &st), KPC_OK);
    kpc_context_destroy(ctx);
    kpc_cache_close(c);
    *log = ts_log_end();
    *builds = fake ? ts_fake_compiles() - before : (unsigned)st.builds;
    if (fresh_local)
        ts_cleanup(fresh_local);
    return code;
}

/* The fresh cache is not served the forged object: it builds the honest one, names the
 * refused entry, and nothing outside the tree changes. */
static void expect_refused(const tree *t, const char *what, bool fake)
{
    int outside_before = count_files(t->outside);
    size_t size;
    unsigned builds;
    char *log;
    void *got = fresh_get(t, &size, &builds, &log, fake);
    const char *where = t->shared ? "KPC_SHARED_DIR" : "the cache directory";
    ck_assert_msg(!(size == t->forged_code_size && memcmp(got, t->forged_code, size) == 0),
                  "%s in %s: the forged object was served", what, where);
    ck_assert_msg(size == t->honest_size && memcmp(got, t->honest, size) == 0, "%s in %s: not the honest bytes",
                  what, where);
    ck_assert_msg(builds == 1, "%s in %s: %u builds, not 1", what, where, builds);
    ck_assert_msg(count_files(t->outside) == outside_before, "%s in %s: a file was written outside the tree",
                  what, where);
    ck_assert_msg(strstr(log, t->attacked) && strstr(log, "refused"), "%s in %s: the log does not name %s:\n%s",
                  what, where, t->attacked, log);
    free(got);
    free(log);
}

/* ---- the attacks: each leaves the forged record where a reader of the tree would look,
 * and sets t->attacked to the entry that breaks the rule -------------------------------- */
typedef void (*attack_fn)(tree *t);

static void v1_of_another_user(tree *t)
{
    plant(t, t->rec, geteuid(), getegid(), 0600);
    snprintf(t->attacked, sizeof t->attacked, "%s/v1", t->real);
    ck_assert_int_eq(chown(t->attacked, OTHER, OTHER), 0);
}

static void target_dir_0777(tree *t)
{
    plant(t, t->rec, geteuid(), getegid(), 0600);
    snprintf(t->attacked, sizeof t->attacked, "%s", t->target_dir);
    ck_assert_int_eq(chmod(t->attacked, 0777), 0);
}

static void record_dir_of_another_user(tree *t)
{
    plant(t, t->rec, geteuid(), getegid(), 0600);
    snprintf(t->attacked, sizeof t->attacked, "%s", t->fan_dir);
    ck_assert_int_eq(chown(t->attacked, OTHER, OTHER), 0);
}

static void record_of_another_user(tree *t)
{
    plant(t, t->rec, OTHER, OTHER, 0644);
    snprintf(t->attacked, sizeof t->attacked, "%s", t->rec);
}

static void record_others_may_write(tree *t)
{
    plant(t, t->rec, geteuid(), getegid(), 0666);
    snprintf(t->attacked, sizeof t->attacked, "%s", t->rec);
}

/* v1/<target> -> outside/forged, a tree holding the forged record */
static void target_dir_a_link_to_a_forged_tree(tree *t)
{
    char forged[4500], fan[4600], rec[4700];
    snprintf(forged, sizeof forged, "%s/forged", t->outside);
    snprintf(fan, sizeof fan, "%s/%s", forged, strrchr(t->fan_dir, '/') + 1);
    snprintf(rec, sizeof rec, "%s/%s", fan, strrchr(t->rec, '/') + 1);
    ck_assert_int_eq(mkdir(forged, 0700), 0);
    ck_assert_int_eq(mkdir(fan, 0700), 0);
    plant(t, rec, geteuid(), getegid(), 0600);
    ts_rm_rf(t->target_dir);
    ck_assert_int_eq(symlink(forged, t->target_dir), 0);
    snprintf(t->attacked, sizeof t->attacked, "%s", t->target_dir);
}

/* v1/<target>/<2 hex> -> outside/empty: a build must not write its record there */
static void record_dir_a_link_outside(tree *t)
{
    char empty[4400];
    snprintf(empty, sizeof empty, "%s/empty", t->outside);
    ck_assert_int_eq(mkdir(empty, 0700), 0);
    ts_rm_rf(t->fan_dir);
    ck_assert_int_eq(symlink(empty, t->fan_dir), 0);
    snprintf(t->attacked, sizeof t->attacked, "%s", t->fan_dir);
}

/* One attack on the cache directory, then on KPC_SHARED_DIR, on the fake compiler */
static void both_trees(attack_fn attack, const char *what, bool needs_root)
{
    if (needs_root && geteuid() != 0) {
        ts_skip("%s: another user's entry needs root to make", what);
        return;
    }
    ts_fake_install();
    for (int shared = 0; shared <= 1; shared++) {
        tree t;
        tree_make(&t, shared);
        attack(&t);
        expect_refused(&t, what, true);
        tree_free(&t);
    }
    ts_fake_remove();
}

START_TEST(the_forged_record_is_served_where_no_rule_is_broken)
{
    ts_fake_install();
    for (int shared = 0; shared <= 1; shared++) {
        tree t;
        tree_make(&t, shared);
        plant(&t, t.rec, geteuid(), getegid(), 0600);
        size_t size;
        unsigned builds;
        char *log;
        void *got = fresh_get(&t, &size, &builds, &log, true);
        ck_assert_msg(builds == 0 && size == t.forged_code_size && memcmp(got, t.forged_code, size) == 0,
                      "%s: the control did not read the forged record (%u builds)", shared ? "shared" : "local",
                      builds);
        free(got);
        free(log);
        tree_free(&t);
    }
    ts_fake_remove();
}
END_TEST

static const struct {
    attack_fn attack;
    const char *what;
    bool needs_root;
} attacks[] = {
    {v1_of_another_user, "v1/ owned by another user", true},
    {target_dir_0777, "v1/<target> mode 0777", false},
    {record_dir_of_another_user, "a record directory owned by another user", true},
    {record_of_another_user, "a record file owned by another user", true},
    {record_others_may_write, "a record file mode 0666", false},
    {target_dir_a_link_to_a_forged_tree, "v1/<target> a symbolic link to a forged tree", false},
    {record_dir_a_link_outside, "a record directory a symbolic link outside the tree", false},
};

/* attacks[_i] (a loop test: one case each) */
START_TEST(the_attack_is_refused)
{
    both_trees(attacks[_i].attack, attacks[_i].what, attacks[_i].needs_root);
}
END_TEST

/* The same through real hipRTC: the symbolic link to a forged tree, in both trees */
START_TEST(a_forged_tree_is_not_served_through_hiprtc)
{
    for (int shared = 0; shared <= 1; shared++) {
        tree t;
        tree_make(&t, shared);
        target_dir_a_link_to_a_forged_tree(&t);
        expect_refused(&t, "v1/<target> a symbolic link to a forged tree (hipRTC)", false);
        ck_assert(ts_is_code_object(t.honest, t.honest_size));
        tree_free(&t);
    }
}
END_TEST

/* KPC_TRUST_GROUP=<group>: a record directory and a record of another member (uid
 * 65534, group nogroup), writable by the group, are trusted; one others may write is
 * not; and without the setting the group's are refused. */
START_TEST(the_trust_group_trusts_exactly_its_group)
{
    if (geteuid() != 0) {
        ts_skip("a member's entry of another uid needs root to make");
        return;
    }
    struct group *gr = getgrgid(OTHER);
    if (gr == NULL) {
        ts_skip("no group of gid %d to trust", OTHER);
        return;
    }
    char name[64];
    snprintf(name, sizeof name, "%s", gr->gr_name);
    ts_fake_install();
    for (int shared = 0; shared <= 1; shared++) {
        tree t;
        tree_make(&t, shared);
        plant(&t, t.rec, OTHER, OTHER, 0660);
        ck_assert_int_eq(chown(t.fan_dir, OTHER, OTHER), 0);
        ck_assert_int_eq(chmod(t.fan_dir, 02770), 0);
        /* the group named: its member's record is served */
        setenv("KPC_TRUST_GROUP", name, 1);
        size_t size;
        unsigned builds;
        char *log;
        void *got = fresh_get(&t, &size, &builds, &log, true);
        ck_assert_msg(builds == 0 && size == t.forged_code_size && memcmp(got, t.forged_code, size) == 0,
                      "KPC_TRUST_GROUP=%s: the group's record was not served (%u builds):\n%s", name, builds, log);
        free(got);
        free(log);
        /* writable by every user: refused even so */
        ck_assert_int_eq(chmod(t.fan_dir, 0777), 0);
        snprintf(t.attacked, sizeof t.attacked, "%s", t.fan_dir);
        expect_refused(&t, "a record directory mode 0777 under KPC_TRUST_GROUP", true);
        /* the group not named: refused */
        unsetenv("KPC_TRUST_GROUP");
        ck_assert_int_eq(chmod(t.fan_dir, 02770), 0);
        plant(&t, t.rec, OTHER, OTHER, 0660);
        expect_refused(&t, "a record directory of the group without KPC_TRUST_GROUP", true);
        tree_free(&t);
    }
    /* what kpc makes under the setting is the group's: directories setgid 2770, records
     * 0640, so the other members may read them and store beside them */
    setenv("KPC_TRUST_GROUP", name, 1);
    tree t;
    tree_make(&t, false);
    struct stat ds, fs;
    ck_assert_int_eq(lstat(t.fan_dir, &ds), 0);
    ck_assert_int_eq(lstat(t.rec, &fs), 0);
    ck_assert_msg(ds.st_gid == (gid_t)OTHER && (ds.st_mode & 07777) == 02770, "%s: gid %u mode %04o", t.fan_dir,
                  (unsigned)ds.st_gid, (unsigned)(ds.st_mode & 07777));
    ck_assert_msg(fs.st_gid == (gid_t)OTHER && (fs.st_mode & 07777) == 0640, "%s: gid %u mode %04o", t.rec,
                  (unsigned)fs.st_gid, (unsigned)(fs.st_mode & 07777));
    tree_free(&t);
    ts_fake_remove();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("trust_tree");
    TCase *tc = ts_case(s, "tree", 300, NULL, NULL);
    const TTest *tests[] = {the_forged_record_is_served_where_no_rule_is_broken, NULL};
    ts_add_tests(tc, tests);
    tcase_add_loop_test(tc, the_attack_is_refused, 0, (int)(sizeof attacks / sizeof attacks[0]));
    const TTest *more[] = {a_forged_tree_is_not_served_through_hiprtc, the_trust_group_trusts_exactly_its_group, NULL};
    ts_add_tests(tc, more);
    return ts_run_suite(s);
}
