/* bytes.h - little-endian integer encoding, byte by byte (no struct casts),
 * and checked size arithmetic, for the file formats and saved states. */
#ifndef SLUICE_BYTES_H
#define SLUICE_BYTES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

static inline uint16_t sl__get16(const unsigned char *p) {
  return (uint16_t)(p[0] | p[1] << 8);
}
static inline uint32_t sl__get32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}
static inline uint64_t sl__get64(const unsigned char *p) {
  return (uint64_t)sl__get32(p) | (uint64_t)sl__get32(p + 4) << 32;
}
static inline void sl__put16(unsigned char *p, uint16_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
}
static inline void sl__put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}
static inline void sl__put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

/* *r = a + b; false on overflow. */
static inline bool sl__add_ok(uint64_t a, uint64_t b, uint64_t *r) {
  return !__builtin_add_overflow(a, b, r);
}
/* *r = a * b; false on overflow. */
static inline bool sl__mul_ok(uint64_t a, uint64_t b, uint64_t *r) {
  return !__builtin_mul_overflow(a, b, r);
}
/* Rounds v up to a multiple of a (a power of two). */
static inline uint64_t sl__align_up(uint64_t v, uint64_t a) {
  return (v + a - 1) & ~(a - 1);
}

#endif
