/* crc32c.h - CRC32C (Castagnoli), the checksum of every SLR structure and of
 * every saved reader state. */
#ifndef SLUICE_CRC32C_H
#define SLUICE_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extends `crc` (0 to start) over `n` bytes.  Uses the SSE4.2 instruction
 * when the CPU has it, a table-driven fallback otherwise.  Thread-safe. */
uint32_t sl__crc32c(uint32_t crc, const void *data, size_t n);
/* The portable fallback, exposed so tests check both paths agree. */
uint32_t sl__crc32c_sw(uint32_t crc, const void *data, size_t n);
/* 1 when the hardware path is in use. */
int sl__crc32c_hw(void);

#endif
