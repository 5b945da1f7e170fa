//go:build amd64 && !purego

#include "textflag.h"

// func internRunASM(tok *scanToken, n int, text, out *byte, w int, slots *internSlot, shift uint, gen uint32, keys *span, nk int, idv, sqv *int32, ns int, masks *[2][maxPacked + 1]uint64) (done, w2, nk2, ns2 int)
//
// internRunGo (internrun.go) step for step. Registers: R8 the token, BX
// its idv entry, DI out, R10 w, R11 slots, R12 nk, R13 ns; R14 and R15
// the token's packed key (lo, hi). Only plain x86-64 instructions.
TEXT ·internRunASM(SB), NOSPLIT, $8-144
	MOVQ tok+0(FP), R8
	MOVQ n+8(FP), AX
	LEAQ (AX)(AX*2), AX
	LEAQ (R8)(AX*4), AX     // 12-byte tokens
	MOVQ AX, end-8(SP)
	MOVQ out+24(FP), DI
	MOVQ w+32(FP), R10
	MOVQ slots+40(FP), R11
	MOVQ nk+72(FP), R12
	MOVQ ns+96(FP), R13
	MOVQ idv+80(FP), BX

loop:
	CMPQ R8, end-8(SP)
	JAE  exit
	CMPL 8(R8), $1          // field
	JNE  exit
	MOVLQZX 0(R8), AX       // start
	MOVLQZX 4(R8), DX       // end
	SUBQ AX, DX             // n
	CMPQ DX, $16            // maxPacked
	JA   exit

	// lo, hi: the token's 16 bytes lowercased, masked to its n bytes.
	MOVQ text+16(FP), SI
	MOVQ 0(SI)(AX*1), R14
	MOVQ 8(SI)(AX*1), R15
	MOVQ $0x2020202020202020, CX
	ORQ  CX, R14
	ORQ  CX, R15
	MOVQ masks+104(FP), SI  // lo's masks, then hi's (maxPacked+1 each)
	ANDQ 0(SI)(DX*8), R14
	ANDQ 136(SI)(DX*8), R15
	MOVQ R14, 0(DI)(R10*1)
	MOVQ R15, 8(DI)(R10*1)

	// The slot: hashPacked(lo, hi, n) >> shift, 24 bytes each.
	MOVQ  $0x9E3779B97F4A7C15, AX
	IMULQ R14, AX
	XORQ  R15, AX
	XORQ  DX, AX
	MOVQ  $0xD6E8FEB86659FD93, CX
	IMULQ CX, AX
	MOVQ  shift+48(FP), CX
	SHRQ  CX, AX
	LEAQ  (AX)(AX*2), AX
	LEAQ  (R11)(AX*8), AX
	MOVL  gen+56(FP), CX
	ORL   DX, CX            // tag = gen | n

	// found: lo, hi and tag equal (SI == 0); empty: the slot's generation
	// is not gen (DX = 1): tags differ in more than their low byte, the
	// length. Neither: leave for the slow path.
	MOVQ  0(AX), SI
	XORQ  R14, SI
	MOVQ  8(AX), R9
	XORQ  R15, R9
	ORQ   R9, SI
	MOVL  16(AX), R9
	XORL  CX, R9
	ORQ   R9, SI
	XORL  DX, DX
	CMPL  R9, $0x100
	SETCC DL                // unsigned ≥
	CMPQ  SI, $1            // carry ⇔ found
	MOVL  DX, R9
	ADCL  $0, R9
	JEQ   exit

	// id: the slot's, or nk for a new key. Written either way.
	MOVL    20(AX), R9
	TESTL   DX, DX
	CMOVLNE R12, R9
	MOVQ    R14, 0(AX)
	MOVQ    R15, 8(AX)
	MOVL    CX, 16(AX)
	MOVL    R9, 20(AX)

	// keys[nk] = {w, w+n}; w += n; nk += empty.
	MOVBQZX CX, R14
	MOVQ    keys+64(FP), SI
	MOVL    R10, 0(SI)(R12*8)
	ADDQ    R14, R10
	MOVL    R10, 4(SI)(R12*8)
	ADDQ    DX, R12

	// idv[k] = id; sqv[ns] = id; ns += id >= articleIDs (3).
	MOVL R9, 0(BX)
	MOVQ sqv+88(FP), SI
	MOVL R9, 0(SI)(R13*4)
	CMPL R9, $3
	SBBQ $-1, R13

	ADDQ $12, R8
	ADDQ $4, BX
	JMP  loop

exit:
	MOVQ BX, AX
	SUBQ idv+80(FP), AX
	SHRQ $2, AX
	MOVQ AX, done+112(FP)
	MOVQ R10, w2+120(FP)
	MOVQ R12, nk2+128(FP)
	MOVQ R13, ns2+136(FP)
	RET
