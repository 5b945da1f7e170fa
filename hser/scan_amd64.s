//go:build amd64 && !purego

#include "textflag.h"

// func scanASM(text *byte, blocks int, tok *scanToken, consts *[7][16]byte) (startBytes, endBytes int, flags uint64)
//
// scanGo (scan.go) step for step, with each 64-byte block classified 16
// bytes at a time in SSE2 (in every amd64 CPU) instead of 8 in SWAR. For
// ASCII bytes, signed byte compares after an offset test the ranges:
//
//	digit:   x + 0x50 < -118 (signed)   ⇔ '0' ≤ x ≤ '9'
//	letter:  (x|0x20) + 0x1f < -102     ⇔ 'a' ≤ x|0x20 ≤ 'z'
//	space:   x < 0x21                   ⇔ x ≤ ' '
//	control: x + 1 < 0x21               ⇔ x < ' ' or x = 0x7f (0x80 = -128)
//
// It returns the bytes of tokens whose starts and ends it wrote (12 each),
// and flags: 1 if a block is not ASCII (it stops there), 2 if some byte is
// a control character. consts holds 0x50, 0x8a, 0x20, 0x1f, 0x9a, 0x01,
// 0x21, each in all 16 bytes.
//
// Registers: SI the block, R9 blocks left, R10 its offset (base), DI the
// next token start, R8 the next token end, R11 carryAl, R12 carrySp; AX al,
// BX sp, DX starts, R13 ends, R14 gapSp; X5 the control bytes so far, X6
// the block's bytes ORed, X8–X14 the constants.
TEXT ·scanASM(SB), NOSPLIT, $0-56
	MOVQ   consts+24(FP), AX
	MOVOU  0(AX), X8
	MOVOU  16(AX), X9
	MOVOU  32(AX), X10
	MOVOU  48(AX), X11
	MOVOU  64(AX), X12
	MOVOU  80(AX), X13
	MOVOU  96(AX), X14
	PXOR   X5, X5
	MOVQ   text+0(FP), SI
	MOVQ   blocks+8(FP), R9
	MOVQ   tok+16(FP), DI
	MOVQ   DI, R8
	XORQ   R10, R10
	XORQ   R11, R11
	XORQ   R12, R12

block:
	PXOR X6, X6
	XORQ AX, AX
	XORQ BX, BX

#define CHUNK(off, shift) \
	MOVOU    off(SI), X0; \
	POR      X0, X6; \
	MOVO     X0, X1; \
	PADDB    X8, X1; \
	MOVO     X9, X2; \
	PCMPGTB  X1, X2; \
	MOVO     X0, X1; \
	POR      X10, X1; \
	PADDB    X11, X1; \
	MOVO     X12, X3; \
	PCMPGTB  X1, X3; \
	POR      X3, X2; \
	PMOVMSKB X2, CX; \
	SHLQ     $shift, CX; \
	ORQ      CX, AX; \
	MOVO     X14, X3; \
	PCMPGTB  X0, X3; \
	PMOVMSKB X3, CX; \
	SHLQ     $shift, CX; \
	ORQ      CX, BX; \
	MOVO     X0, X1; \
	PADDB    X13, X1; \
	MOVO     X14, X4; \
	PCMPGTB  X1, X4; \
	POR      X4, X5

	CHUNK(0, 0)
	CHUNK(16, 16)
	CHUNK(32, 32)
	CHUNK(48, 48)

	PMOVMSKB X6, CX
	TESTL    CX, CX
	JNE      notascii

	// prev = al<<1 | carryAl; starts = al &^ prev; ends = prev &^ al.
	MOVQ AX, R15
	SHLQ $1, R15
	ORQ  R11, R15
	MOVQ AX, R11
	SHRQ $63, R11
	MOVQ R15, DX
	NOTQ DX
	ANDQ AX, DX
	MOVQ AX, R13
	NOTQ R13
	ANDQ R15, R13

	// gapSp, carrySp = ^al + sp + carrySp.
	MOVQ  AX, R14
	NOTQ  R14
	BTQ   $0, R12
	MOVL  $0, R12
	ADCQ  BX, R14
	SETCS R12B

	TESTQ DX, DX
	JEQ   ends

starts:
	BSFQ  DX, CX
	LEAL  (R10)(CX*1), R15
	MOVL  R15, 0(DI)
	XORL  R15, R15
	BTQ   CX, R14
	SETCS R15B
	MOVL  R15, 8(DI)
	ADDQ  $12, DI
	LEAQ  -1(DX), R15
	ANDQ  R15, DX
	JNE   starts

ends:
	TESTQ R13, R13
	JEQ   next

endloop:
	BSFQ R13, CX
	LEAL (R10)(CX*1), R15
	MOVL R15, 4(R8)
	ADDQ $12, R8
	LEAQ -1(R13), R15
	ANDQ R15, R13
	JNE  endloop

next:
	ADDQ $64, SI
	ADDQ $64, R10
	DECQ R9
	JNE  block

	XORQ     AX, AX
	PMOVMSKB X5, CX
	TESTL    CX, CX
	JEQ      done
	MOVQ     $2, AX

done:
	MOVQ tok+16(FP), CX
	SUBQ CX, DI
	SUBQ CX, R8
	MOVQ DI, startBytes+32(FP)
	MOVQ R8, endBytes+40(FP)
	MOVQ AX, flags+48(FP)
	RET

notascii:
	MOVQ $1, AX
	JMP  done
