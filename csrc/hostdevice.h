/*
 * hostdevice.h - one qualifier for functions compiled both for the host (C) and for CUDA
 * devices, so the CPU and GPU verifiers share the same code for their random draws and
 * decision rules (and the CPU tests cover both).
 */
#ifndef PYSPEC_HOSTDEVICE_H
#define PYSPEC_HOSTDEVICE_H

#if defined(__CUDACC__)
#  define PYSPEC_HD static __host__ __device__ __forceinline__
#else
#  define PYSPEC_HD static inline
#endif

#endif /* PYSPEC_HOSTDEVICE_H */
