/*
 * crc32c.c - CRC32C (Castagnoli polynomial 0x1EDC6F41, reflected 0x82F63B78).
 *
 * Two implementations: the SSE4.2 crc32 instruction (8 bytes per step) picked
 * at run time with __builtin_cpu_supports, and a slicing-by-8 table fallback
 * for other CPUs.  Both are checked against the standard test vectors.
 */
#include "core/crc32c.h"

#include <pthread.h>
#include <string.h>

#define POLY 0x82F63B78u

static uint32_t g_table[8][256];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_hw;

static void init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++)
      c = (c >> 1) ^ (POLY & (0u - (c & 1)));
    g_table[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int t = 1; t < 8; t++)
      g_table[t][i] =
          (g_table[t - 1][i] >> 8) ^ g_table[0][g_table[t - 1][i] & 0xff];
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  g_hw = __builtin_cpu_supports("sse4.2");
#endif
}

uint32_t sl__crc32c_sw(uint32_t crc, const void *data, size_t n) {
  pthread_once(&g_once, init);
  const unsigned char *p = data;
  crc = ~crc;
  while (n >= 8) {
    /* Byte-wise composition keeps this correct on any endianness. */
    uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 |
                         (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
    crc = g_table[7][lo & 0xff] ^ g_table[6][(lo >> 8) & 0xff] ^
          g_table[5][(lo >> 16) & 0xff] ^ g_table[4][lo >> 24] ^
          g_table[3][p[4]] ^ g_table[2][p[5]] ^ g_table[1][p[6]] ^
          g_table[0][p[7]];
    p += 8;
    n -= 8;
  }
  while (n--)
    crc = (crc >> 8) ^ g_table[0][(crc ^ *p++) & 0xff];
  return ~crc;
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("sse4.2"))) static uint32_t
crc_hw(uint32_t crc, const void *data, size_t n) {
  const unsigned char *p = data;
  uint64_t c = ~crc;
  while (n && ((uintptr_t)p & 7)) {
    c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
    n--;
  }
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    c = __builtin_ia32_crc32di(c, w);
    p += 8;
    n -= 8;
  }
  while (n--)
    c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
  return ~(uint32_t)c;
}
#endif

uint32_t sl__crc32c(uint32_t crc, const void *data, size_t n) {
  pthread_once(&g_once, init);
#if defined(__x86_64__) && defined(__GNUC__)
  if (g_hw) return crc_hw(crc, data, n);
#endif
  return sl__crc32c_sw(crc, data, n);
}

int sl__crc32c_hw(void) {
  pthread_once(&g_once, init);
  return g_hw;
}
