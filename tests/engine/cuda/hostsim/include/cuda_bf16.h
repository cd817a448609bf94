// hostsim: the bf16 type and conversions come from cuda_host.h (force-included).
#pragma once
