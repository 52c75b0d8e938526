/* symbol.c - addresses to function names for the stall watchdog: dladdr finds the file that
 * holds the address and where it is loaded; that file's ELF symbol tables (.symtab when the
 * binary is not stripped, which also names static functions, else .dynsym) give the function
 * whose range holds it. The last file read stays mapped (stalls are rare; the watchdog thread
 * is the only caller). Without a symbol: "file+0xoffset", which addr2line -f -e file resolves. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hd_impl.h"

static struct {
    char path[512];
    const uint8_t *map;
    size_t size;
} cache;

static const uint8_t *file_map(const char *path, size_t *size)
{
    if (cache.map && strcmp(cache.path, path) == 0) {
        *size = cache.size;
        return cache.map;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct stat st;
    void *m = MAP_FAILED;
    if (fstat(fd, &st) == 0 && st.st_size > (off_t)sizeof(Elf64_Ehdr))
        m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return NULL;
    if (cache.map)
        munmap((void *)cache.map, cache.size);
    cache.map = m;
    cache.size = (size_t)st.st_size;
    snprintf(cache.path, sizeof(cache.path), "%s", path);
    *size = cache.size;
    return cache.map;
}

/* The function symbol of table `type` covering file-relative address rel, or NULL. */
static const char *find_in(const uint8_t *f, size_t size, uint32_t type, uint64_t rel)
{
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)f;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
        eh->e_shoff == 0 || eh->e_shoff + (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr) > size)
        return NULL;
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(f + eh->e_shoff);
    for (unsigned i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != type || sh[i].sh_link >= eh->e_shnum)
            continue;
        const Elf64_Shdr *strs = &sh[sh[i].sh_link];
        if (sh[i].sh_offset + sh[i].sh_size > size || strs->sh_offset + strs->sh_size > size)
            return NULL;
        const Elf64_Sym *sym = (const Elf64_Sym *)(f + sh[i].sh_offset);
        size_t n = sh[i].sh_size / sizeof(Elf64_Sym);
        for (size_t j = 0; j < n; j++) {
            if (ELF64_ST_TYPE(sym[j].st_info) != STT_FUNC || sym[j].st_value == 0)
                continue;
            uint64_t lo = sym[j].st_value, hi = lo + (sym[j].st_size ? sym[j].st_size : 1);
            if (rel >= lo && rel < hi && sym[j].st_name < strs->sh_size)
                return (const char *)(f + strs->sh_offset + sym[j].st_name);
        }
    }
    return NULL;
}

void hd_symbolize(const void *addr, char *out, size_t size)
{
    Dl_info info;
    if (dladdr(addr, &info) == 0 || info.dli_fname == NULL) {
        snprintf(out, size, "%p", addr);
        return;
    }
    const char *file = info.dli_fname;
    char exe[512];
    if (file[0] == '\0' || strchr(file, '/') == NULL) { /* the main program */
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        exe[n > 0 ? n : 0] = '\0';
        file = exe;
    }
    uint64_t rel = (uint64_t)((uintptr_t)addr - (uintptr_t)info.dli_fbase);
    size_t fsize;
    const uint8_t *f = file_map(file, &fsize);
    const char *name = NULL;
    if (f) {
        /* A non-PIE executable's symbols hold absolute addresses. */
        const Elf64_Ehdr *eh = (const Elf64_Ehdr *)f;
        uint64_t key = eh->e_type == ET_EXEC ? (uint64_t)(uintptr_t)addr : rel;
        name = find_in(f, fsize, SHT_SYMTAB, key);
        if (name == NULL)
            name = find_in(f, fsize, SHT_DYNSYM, key);
    }
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    if (name)
        snprintf(out, size, "%s (%s)", name, base);
    else
        snprintf(out, size, "%s+0x%llx", base, (unsigned long long)rel);
}
