//! The instructions the cache model must see besides plain loads and stores, recognised from
//! their bytes at translation (64-bit code): flushes of one line (CLFLUSH, CLFLUSHOPT, CLWB),
//! of the whole cache (WBINVD, INVD) and non-temporal stores (MOVNTI, MOVNTPS/PD, MOVNTQ,
//! MOVNTDQ and their VEX forms). TCG runs a flush as a no-op without a memory access, so the
//! plugin computes its address from the registers when it executes.

/// A memory operand: `seg:[base + index * 2^scale + disp]`, or `[rip + disp]` where `rip` is
/// the next instruction's address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operand {
    /// Register numbers as the encoding has them (0 rax, 1 rcx, 2 rdx, 3 rbx, 4 rsp, 5 rbp,
    /// 6 rsi, 7 rdi, 8-15 r8-r15).
    pub base: Option<u8>,
    pub index: Option<u8>,
    pub scale: u8,
    pub disp: i64,
    pub rip_relative: bool,
    pub seg: Seg,
    /// An address-size prefix: the address is 32 bits.
    pub addr32: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seg {
    /// Flat (CS, DS, ES, SS have base 0 in 64-bit mode).
    None,
    Fs,
    Gs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Special {
    /// CLFLUSH, CLFLUSHOPT (`keep` false) or CLWB (`keep` true) of the line at the operand.
    Flush { keep: bool, at: Operand },
    /// WBINVD (`write_back`) or INVD.
    FlushAll { write_back: bool },
    /// A non-temporal store: its memory access is one.
    NtStore,
}

/// What `bytes` (one whole instruction of 64-bit code) is, if the model must treat it apart.
pub fn classify(bytes: &[u8]) -> Option<Special> {
    let (mut i, mut p66, mut rep, mut seg, mut addr32) = (0, false, false, Seg::None, false);
    while let Some(&b) = bytes.get(i) {
        match b {
            0x66 => p66 = true,
            0x67 => addr32 = true,
            0xf2 | 0xf3 => rep = true,
            0x64 => seg = Seg::Fs,
            0x65 => seg = Seg::Gs,
            0x26 | 0x2e | 0x36 | 0x3e | 0xf0 => {}
            _ => break,
        }
        i += 1;
    }
    let mut rex = 0;
    if bytes.get(i).is_some_and(|b| b & 0xf0 == 0x40) {
        rex = bytes[i];
        i += 1;
    }
    let memory = |m: usize| bytes.get(m).is_some_and(|modrm| modrm >> 6 != 3);
    match *bytes.get(i)? {
        // VEX, two bytes: map 0F; pp in the low bits (1: 66).
        0xc5 => {
            let pp = bytes.get(i + 1)? & 3;
            nt_vex(*bytes.get(i + 2)?, pp, memory(i + 3))
        }
        // VEX, three bytes: the map in the first's low bits (1: 0F).
        0xc4 => {
            let map = bytes.get(i + 1)? & 0x1f;
            let pp = bytes.get(i + 2)? & 3;
            if map != 1 {
                return None;
            }
            nt_vex(*bytes.get(i + 3)?, pp, memory(i + 4))
        }
        0x0f => match *bytes.get(i + 1)? {
            0x08 => Some(Special::FlushAll { write_back: false }),
            // F3 0F 09 is WBNOINVD (writes back, keeps the lines): not modelled.
            0x09 if !rep => Some(Special::FlushAll { write_back: true }),
            0x2b | 0xe7 | 0xc3 if memory(i + 2) => Some(Special::NtStore),
            0xae if memory(i + 2) && !rep => {
                let reg = (bytes[i + 2] >> 3) & 7;
                let keep = match (reg, p66) {
                    (7, _) => false,   // CLFLUSH; with 66, CLFLUSHOPT
                    (6, true) => true, // CLWB (without 66: XSAVEOPT)
                    _ => return None,
                };
                let at = operand(bytes, i + 2, rex, seg, addr32)?;
                Some(Special::Flush { keep, at })
            }
            _ => None,
        },
        _ => None,
    }
}

/// VMOVNTPS/VMOVNTPD (0F 2B) and VMOVNTDQ (66 0F E7) to memory.
fn nt_vex(opcode: u8, pp: u8, memory: bool) -> Option<Special> {
    (memory && (opcode == 0x2b || (opcode == 0xe7 && pp == 1))).then_some(Special::NtStore)
}

/// The memory operand of the ModRM byte at `m` (and its SIB and displacement after it).
fn operand(bytes: &[u8], m: usize, rex: u8, seg: Seg, addr32: bool) -> Option<Operand> {
    let modrm = *bytes.get(m)?;
    let (md, rm) = (modrm >> 6, modrm & 7);
    let (rex_b, rex_x) = ((rex & 1) << 3, (rex & 2) << 2);
    let mut op = Operand { base: None, index: None, scale: 0, disp: 0, rip_relative: false, seg, addr32 };
    let mut j = m + 1;
    let mut disp32 = md == 2;
    if rm == 4 {
        let sib = *bytes.get(j)?;
        j += 1;
        let index = ((sib >> 3) & 7) | rex_x;
        // Index 100 without REX.X is "none"; with it, r12.
        if index != 4 {
            op.index = Some(index);
            op.scale = sib >> 6;
        }
        if sib & 7 == 5 && md == 0 {
            disp32 = true;
        } else {
            op.base = Some((sib & 7) | rex_b);
        }
    } else if rm == 5 && md == 0 {
        op.rip_relative = true;
        disp32 = true;
    } else {
        op.base = Some(rm | rex_b);
    }
    if md == 1 {
        op.disp = i64::from(*bytes.get(j)? as i8);
    } else if disp32 {
        let d: [u8; 4] = bytes.get(j..j + 4)?.try_into().ok()?;
        op.disp = i64::from(i32::from_le_bytes(d));
    }
    Some(op)
}

impl Operand {
    /// The linear address, given each register's value (`reg(n)`), the FS and GS bases and
    /// the address of the instruction after this one.
    pub fn address(&self, reg: impl Fn(u8) -> u64, fs_base: u64, gs_base: u64, next_ip: u64) -> u64 {
        let mut a = if self.rip_relative { next_ip } else { self.base.map_or(0, &reg) };
        if let Some(x) = self.index {
            a = a.wrapping_add(reg(x).wrapping_shl(u32::from(self.scale)));
        }
        a = a.wrapping_add(self.disp as u64);
        if self.addr32 {
            a &= 0xffff_ffff;
        }
        match self.seg {
            Seg::None => a,
            Seg::Fs => a.wrapping_add(fs_base),
            Seg::Gs => a.wrapping_add(gs_base),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flush(bytes: &[u8]) -> (bool, Operand) {
        match classify(bytes) {
            Some(Special::Flush { keep, at }) => (keep, at),
            other => panic!("{bytes:02x?}: {other:?}"),
        }
    }

    /// Encodings as GNU as writes them (objdump of the instructions named).
    #[test]
    fn flushes_and_their_operands() {
        // clflush (%rax)
        let (keep, at) = flush(&[0x0f, 0xae, 0x38]);
        assert!(!keep);
        assert_eq!((at.base, at.index, at.disp, at.rip_relative), (Some(0), None, 0, false));
        // clflushopt 0x40(%rdi)
        let (keep, at) = flush(&[0x66, 0x0f, 0xae, 0x7f, 0x40]);
        assert_eq!((keep, at.base, at.disp), (false, Some(7), 0x40));
        // clwb -0x80(%r13,%r12,8)
        let (keep, at) = flush(&[0x66, 0x43, 0x0f, 0xae, 0x74, 0xe5, 0x80]);
        assert_eq!((keep, at.base, at.index, at.scale, at.disp), (true, Some(13), Some(12), 3, -0x80));
        // clflush 0x1000(%rip)
        let (_, at) = flush(&[0x0f, 0xae, 0x3d, 0x00, 0x10, 0x00, 0x00]);
        assert!(at.rip_relative && at.disp == 0x1000 && at.base.is_none());
        assert_eq!(at.address(|_| 0, 0, 0, 0x40_0007), 0x40_1007);
        // clflush %fs:0x10 (SIB with no base and no index: an absolute disp32)
        let (_, at) = flush(&[0x64, 0x0f, 0xae, 0x3c, 0x25, 0x10, 0x00, 0x00, 0x00]);
        assert_eq!((at.base, at.index, at.seg), (None, None, Seg::Fs));
        assert_eq!(at.address(|_| 99, 0x7000, 0, 0), 0x7010);
        // clflush (%rsp): SIB, base rsp, no index
        let (_, at) = flush(&[0x0f, 0xae, 0x3c, 0x24]);
        assert_eq!((at.base, at.index), (Some(4), None));
        // clflush 0x8(%rbx,%rcx,4)
        let (_, at) = flush(&[0x0f, 0xae, 0x7c, 0x8b, 0x08]);
        let regs = |n: u8| [0, 0x10, 0, 0x1000][usize::from(n)];
        assert_eq!(at.address(regs, 0, 0, 0), 0x1000 + 0x10 * 4 + 8);
        // clflush (%r12) needs a SIB whose index 100 with REX.B is still none
        let (_, at) = flush(&[0x41, 0x0f, 0xae, 0x3c, 0x24]);
        assert_eq!((at.base, at.index), (Some(12), None));
        // addr32: clflush (%eax)
        let (_, at) = flush(&[0x67, 0x0f, 0xae, 0x38]);
        assert_eq!(at.address(|_| 0x1_2345_6789, 0, 0, 0), 0x2345_6789);
    }

    #[test]
    fn what_is_not_a_flush() {
        for b in [
            &[0x0f, 0xae, 0xf8][..],   // sfence
            &[0x0f, 0xae, 0xf0],       // mfence
            &[0x0f, 0xae, 0x30],       // xsaveopt (%rax)
            &[0x0f, 0xae, 0x10],       // ldmxcsr (%rax)
            &[0x48, 0x8b, 0x07],       // mov (%rdi),%rax
            &[0xf3, 0x0f, 0x09],       // wbnoinvd
            &[0x66, 0x0f, 0xe7, 0xc1], // movntdq to a register: not encodable, refused
            &[0x0f, 0xae],             // cut short
            &[],
        ] {
            assert!(!matches!(classify(b), Some(Special::Flush { .. })), "{b:02x?}");
        }
        assert_eq!(classify(&[0x48, 0x8b, 0x07]), None);
        assert_eq!(classify(&[0xf3, 0x0f, 0x09]), None);
    }

    #[test]
    fn whole_cache_flushes_and_non_temporal_stores() {
        assert_eq!(classify(&[0x0f, 0x09]), Some(Special::FlushAll { write_back: true }));
        assert_eq!(classify(&[0x0f, 0x08]), Some(Special::FlushAll { write_back: false }));
        for b in [
            &[0x66, 0x0f, 0xe7, 0x07][..],         // movntdq %xmm0,(%rdi)
            &[0x0f, 0x2b, 0x07],                   // movntps %xmm0,(%rdi)
            &[0x66, 0x0f, 0x2b, 0x07],             // movntpd %xmm0,(%rdi)
            &[0x48, 0x0f, 0xc3, 0x07],             // movnti %rax,(%rdi)
            &[0x0f, 0xe7, 0x07],                   // movntq %mm0,(%rdi)
            &[0xc5, 0xfd, 0xe7, 0x07],             // vmovntdq %ymm0,(%rdi)
            &[0xc5, 0xfc, 0x2b, 0x47, 0x20],       // vmovntps %ymm0,0x20(%rdi)
            &[0xc4, 0x41, 0x7d, 0xe7, 0x04, 0x24], // vmovntdq %ymm8,(%r12)
        ] {
            assert_eq!(classify(b), Some(Special::NtStore), "{b:02x?}");
        }
        // vmovdqa %ymm0,(%rdi) and vmovntdqa (a load, 0F38 map) are not.
        assert_eq!(classify(&[0xc5, 0xfd, 0x7f, 0x07]), None);
        assert_eq!(classify(&[0xc4, 0xe2, 0x7d, 0x2a, 0x07]), None);
    }
}
