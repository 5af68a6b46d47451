/*
 * lua_text.h — the Lua-free half of rendering a template (the engine's files, lua_state.h, keep
 * everything that touches the Lua C API): template source files, module names, the output buffer
 * with its #line mapping, and formatted messages.
 */
#ifndef TWELL_LUA_TEXT_H
#define TWELL_LUA_TEXT_H

#include <stddef.h>

#define TW_MAX_SOURCES 16 /* the template plus imported modules */

typedef struct tw_source {
    char *chunk; /* "@templates/<file>": Lua's chunk name; chunk + 1 is the display name */
    char *text;
    size_t len;
} tw_source;

/* How output lines are attributed to template lines (see tw_out_text). */
typedef enum tw_map { TW_MAP_NONE, TW_MAP_FIRST, TW_MAP_BLOCK } tw_map;

typedef struct tw_out {
    char *buf;
    size_t len, cap, max;
    int bol;           /* at the beginning of an output line */
    const char *cfile; /* file NVRTC attributes the next line to (NULL: the program name) */
    long cline;        /* line number NVRTC gives the next line */
} tw_out;

typedef enum tw_out_status {
    TW_OUT_OK,
    TW_OUT_FULL,     /* the output cap (o->max) would be exceeded */
    TW_OUT_NO_MEMORY /* host memory ran out */
} tw_out_status;

/* Appends text. A new output line whose origin (file, line) is known and differs from where
 * NVRTC would place it gets a #line directive first, so compiler messages name template lines.
 * TW_MAP_BLOCK: successive lines come from successive template lines starting at *line;
 * TW_MAP_FIRST: only the first line started here has a known origin; TW_MAP_NONE: none.
 * Stops at the first failure (what was appended stays). */
tw_out_status tw_out_text(tw_out *o, const char *s, size_t n, const char *file, long *line,
                          tw_map map);

/* Largest template or module source read: real ones are tens of KiB, and the cap keeps a
 * misplaced large file from being pulled into the Lua heap. TW_SOURCE_MAX_TEXT spells it. */
#define TW_SOURCE_MAX_BYTES ((size_t)1 << 20)
#define TW_SOURCE_MAX_TEXT "1 MiB"

/* Reads the file at path into src[*nsrc] (display: its name in messages, chunk "@display") and
 * counts it. Only a regular file of at most TW_SOURCE_MAX_BYTES is read; the open never waits
 * (a FIFO is refused, not read). NULL on failure, with errno set and *why a static description
 * for messages: EINVAL (not a regular file), EFBIG (over the cap), EMFILE (all TW_MAX_SOURCES
 * slots used), ENOMEM, or the errno of open/fstat/read. */
tw_source *tw_source_read(tw_source *src, int *nsrc, const char *path, const char *display,
                          const char **why);

/* Template files live in one folder per op under the template directory (templates/<group>/);
 * names stay flat and unique across groups, so `twell render ffn_fused` and the cache keys do
 * not name the group. The groups, searched in this fixed order after the directory itself. */
extern const char *const tw_template_groups[];

/* Finds "<name><suffix>" (suffix ".cu.lua" for a template, ".lua" for a module) in dir or one of
 * its groups and writes its path and display name ("templates/<group>/<file>"). Returns 1 when a
 * regular file is found; -1 when no regular file is but something else has the name (a FIFO, a
 * device, a directory, a link to one), path and display naming the first such entry, for the
 * caller to report; 0 (errno ENOENT) when nothing has it, path and display naming the flat
 * location. */
int tw_template_locate(const char *dir, const char *name, const char *suffix, char *path,
                       size_t path_cap, char *display, size_t display_cap);

/* Line of chunk's source on which the first line of a long string passed at `line` starts:
 * Lua drops a newline right after the opening bracket, so the text starts on the next line
 * then. Falls back to `line` when no long bracket is found within three lines. */
long tw_source_block_line(const tw_source *src, int nsrc, const char *chunk, long line);

/* 1 when s can name a template module: 1 to 100 characters of [A-Za-z0-9_]. */
int tw_source_valid_name(const char *s);

#if defined(__GNUC__)
#define TW_PRINTF_LIKE __attribute__((format(printf, 1, 2)))
#else
#define TW_PRINTF_LIKE
#endif
/* printf into a new malloc'd string; NULL when memory runs out. */
char *tw_fmt(const char *fmt, ...) TW_PRINTF_LIKE;

#endif /* TWELL_LUA_TEXT_H */
